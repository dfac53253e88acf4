//! Summaries of what did not fit.
//!
//! The built-in summarizer is extractive and needs no model: it splits the
//! best dropped memories into sentences, scores each sentence by its
//! memory's rank, its overlap with the query and its position, and keeps the
//! best that fit, each with the id of the memory it came from. The optional
//! LLM summarizer sends the dropped memories to any OpenAI-compatible chat
//! endpoint (`[summarizer]` in `strata.toml`); when it fails, the extractive
//! summary stands in and the package says why.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::package::Cand;
use super::profile::SummarizerKind;
use super::{Summary, SummaryPick};
use crate::Result;
use crate::engine::Engine;
use crate::error::Error;
use crate::model::Memory;
use crate::text;
use crate::tokens::TokenCounter;

/// Most dropped memories a summary of `room` tokens looks at: a line (a
/// sentence and a memory id) costs about 40 tokens and each memory gives at
/// most two, so this fills the room with a margin.
pub fn max_summarized(room: u32) -> usize {
    (room as usize / 40).clamp(8, 256)
}
/// Longest sentence kept whole, in tokens (longer ones are shortened).
pub const MAX_SENTENCE_TOKENS: usize = 48;

/// The `[summarizer]` table: an OpenAI-compatible chat endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarizerConfig {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub url: String,
    /// Model name.
    pub model: String,
    /// Environment variable holding the API key (none: no `Authorization`).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Request timeout in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Most tokens of dropped memories sent.
    #[serde(default = "default_max_input_tokens")]
    pub max_input_tokens: u32,
}

fn default_timeout_ms() -> u64 {
    20_000
}

fn default_max_input_tokens() -> u32 {
    6000
}

impl SummarizerConfig {
    /// Checks the values; errors name the key.
    pub fn validate(&self) -> Result<(), Error> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(Error::InvalidConfig(format!(
                "summarizer.url: `{}` must start with http:// or https://",
                self.url
            )));
        }
        if self.model.trim().is_empty() {
            return Err(Error::InvalidConfig("summarizer.model: empty".into()));
        }
        if self.timeout_ms == 0 {
            return Err(Error::InvalidConfig(
                "summarizer.timeout_ms: must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// The sentences of a text: split at line breaks and after `.`, `!`, `?`
/// followed by white space.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut start = 0;
        let b = line.as_bytes();
        for i in 0..b.len() {
            let end = matches!(b[i], b'.' | b'!' | b'?')
                && b.get(i + 1).is_some_and(|c| c.is_ascii_whitespace());
            if end {
                let s = line[start..=i].trim();
                if !s.is_empty() {
                    out.push(s);
                }
                start = i + 1;
            }
        }
        let s = line[start..].trim();
        if !s.is_empty() {
            out.push(s);
        }
    }
    out
}

/// A tokenizer with the engine's cache of counts (sentences and ids recur
/// across summaries).
#[derive(Debug, Clone, Copy)]
pub struct Counts<'a> {
    /// The tokenizer.
    pub tokens: &'a TokenCounter,
    /// Remembered counts.
    pub cache: &'a super::render::CountCache,
}

impl Counts<'_> {
    /// Exact tokens of `text`.
    pub fn count(&self, text: &str) -> u32 {
        self.cache.count(self.tokens, text)
    }
}

/// One summary line for a sentence of memory `id`, and an upper bound of
/// its tokens (the sentence's, plus the marker's and the id's).
pub fn line(counter: &Counts<'_>, sentence: &str, id: &str) -> (String, u32) {
    let n = counter.count(sentence);
    let (s, n) = if n as usize > MAX_SENTENCE_TOKENS {
        let s = format!(
            "{}…",
            counter
                .tokens
                .head(sentence, MAX_SENTENCE_TOKENS)
                .trim_end()
        );
        let n = counter.count(&s);
        (s, n)
    } else {
        (sentence.to_string(), n)
    };
    let around = 2 + counter.count(&format!(" ({id})\n"));
    (format!("- {s} ({id})\n"), n + around)
}

/// Summarizes `dropped` (best first) within `room` tokens; `None` when
/// nothing fits.
pub(crate) fn summarize(
    engine: &Engine,
    kind: SummarizerKind,
    dropped: &[(usize, Cand)],
    query: &str,
    room: u32,
) -> Result<Option<Summary>> {
    let ids: Vec<String> = dropped
        .iter()
        .take(max_summarized(room))
        .map(|(_, c)| c.sig.id.clone())
        .collect();
    let memories = engine.store().get_many(&ids)?;
    if memories.is_empty() {
        return Ok(None);
    }
    let mut note = None;
    if kind == SummarizerKind::Llm {
        match engine.config().summarizer.as_ref() {
            None => note = Some("llm summarizer: no [summarizer] configured".to_string()),
            Some(cfg) => {
                match llm::summarize(cfg, engine.token_counter(), &memories, query, room) {
                    Ok(s) => return Ok(Some(s)),
                    Err(e) => note = Some(format!("llm summarizer failed: {e}")),
                }
            }
        }
    }
    let counts = Counts {
        tokens: engine.token_counter(),
        cache: engine.count_cache(),
    };
    let mut s = extractive(&counts, &memories, query, room);
    if let Some(s) = s.as_mut() {
        s.note = note;
    }
    Ok(s)
}

/// Summarizes `memories` (best first) within `room` tokens without a
/// query: the LLM summarizer when `[summarizer]` is set (the extractive one,
/// with a note saying why, when it fails), else the extractive one.
pub(crate) fn summarize_memories(
    engine: &Engine,
    memories: &[Memory],
    room: u32,
) -> Option<Summary> {
    let mut note = None;
    if let Some(cfg) = engine.config().summarizer.as_ref() {
        match llm::summarize(cfg, engine.token_counter(), memories, "", room) {
            Ok(s) => return Some(s),
            Err(e) => note = Some(format!("llm summarizer failed: {e}")),
        }
    }
    let counts = Counts {
        tokens: engine.token_counter(),
        cache: engine.count_cache(),
    };
    let mut s = extractive(&counts, memories, "", room)?;
    s.note = note;
    Some(s)
}

/// The extractive summary of `memories` (best first) within `room` tokens.
pub fn extractive(
    counter: &Counts<'_>,
    memories: &[Memory],
    query: &str,
    room: u32,
) -> Option<Summary> {
    // Query terms as stems (as the index matches them); each word's
    // verdict is cached, since the same words recur across sentences.
    let want: Vec<String> = text::query_terms(query)
        .iter()
        .map(|t| text::stem(t))
        .collect();
    let mut verdict: HashMap<String, Option<usize>> = HashMap::new();
    let mut scored: Vec<(f64, usize, usize, String)> = Vec::new();
    for (rank, m) in memories.iter().enumerate() {
        let base = 1.0 / (1.0 + rank as f64 / 4.0);
        for (k, s) in sentences(&m.content).into_iter().enumerate() {
            let overlap = if want.is_empty() {
                0.0
            } else {
                let mut hit = vec![false; want.len()];
                for w in text::words(s) {
                    let v = verdict.entry(w).or_insert_with_key(|w| {
                        let st = text::stem(w);
                        want.iter().position(|t| *t == st)
                    });
                    if let Some(i) = *v {
                        hit[i] = true;
                    }
                }
                hit.iter().filter(|h| **h).count() as f64 / want.len() as f64
            };
            let position = if k == 0 {
                1.1
            } else {
                1.0 / (1.0 + k as f64 / 8.0)
            };
            scored.push((base * (1.0 + overlap) * position, rank, k, s.to_string()));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut used = 0u32;
    let mut text = String::new();
    let mut picks = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    let mut per_memory: HashMap<usize, usize> = HashMap::new();
    for (_, rank, k, s) in scored {
        // At most two sentences of one memory: breadth over depth.
        if per_memory.get(&rank).copied().unwrap_or(0) >= 2 {
            continue;
        }
        if room - used < 8 {
            break;
        }
        let m = &memories[rank];
        let (l, cost) = line(counter, &s, &m.id);
        if used + cost > room {
            continue;
        }
        used += cost;
        text.push_str(&l);
        *per_memory.entry(rank).or_default() += 1;
        picks.push(SummaryPick {
            id: m.id.clone(),
            version: m.version,
            sentence: k,
        });
        if !ids.contains(&m.id) {
            ids.push(m.id.clone());
        }
    }
    if text.is_empty() {
        return None;
    }
    Some(Summary {
        method: "extractive".into(),
        text,
        ids,
        picks,
        tokens: used,
        note: None,
    })
}

/// Rebuilds an extractive summary's text and planned tokens from its picks
/// (for replay); `None` when a pick's memory version is unavailable.
pub(crate) fn rebuild(
    counter: &Counts<'_>,
    picks: &[SummaryPick],
    content: &dyn Fn(&str, u64) -> Option<String>,
) -> Option<(String, u32)> {
    let mut text = String::new();
    let mut tokens = 0;
    for p in picks {
        let c = content(&p.id, p.version)?;
        let s = sentences(&c).get(p.sentence).map(|s| s.to_string())?;
        let (l, n) = line(counter, &s, &p.id);
        text.push_str(&l);
        tokens += n;
    }
    Some((text, tokens))
}

mod llm {
    use super::*;

    pub fn summarize(
        cfg: &SummarizerConfig,
        counter: &TokenCounter,
        memories: &[Memory],
        query: &str,
        room: u32,
    ) -> Result<Summary, String> {
        let mut input = String::new();
        let mut ids = Vec::new();
        let mut used = 0;
        for m in memories {
            let entry = format!("[{}] {}\n", m.id, m.content);
            let t = counter.count(&entry);
            if used + t > cfg.max_input_tokens {
                break;
            }
            used += t;
            input.push_str(&entry);
            ids.push(m.id.clone());
        }
        let words = (room as f64 * 0.6) as u32;
        let system = format!(
            "You summarize memories an AI agent could not fit into its context. \
             Write at most {words} words as short bullet points (\"- …\"), keep facts, \
             names, numbers and decisions, and end each bullet with the id in \
             brackets of the memory it comes from. No preamble."
        );
        let user = if query.is_empty() {
            input
        } else {
            format!("The task: {query}\n\nMemories:\n{input}")
        };
        let content = crate::llm::chat(cfg, &system, &user, room)?.content;
        // Never trust the endpoint with the budget.
        let mut out = content.to_string();
        while counter.count(&out) + 1 > room {
            let n = counter
                .count(&out)
                .saturating_sub(1)
                .min(room.saturating_sub(2)) as usize;
            out = counter.head(&out, n);
            if n == 0 {
                break;
            }
        }
        if out.is_empty() {
            return Err("summary did not fit".into());
        }
        out.push('\n');
        let tokens = counter.count(&out);
        Ok(Summary {
            method: "llm".into(),
            text: out,
            ids,
            picks: Vec::new(),
            tokens,
            note: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_sentences() {
        assert_eq!(
            sentences("We use Postgres. It is fast! Why? Because.\nNext line"),
            vec![
                "We use Postgres.",
                "It is fast!",
                "Why?",
                "Because.",
                "Next line"
            ]
        );
        assert_eq!(sentences("v1.2 is out"), vec!["v1.2 is out"]);
        assert!(sentences("  \n ").is_empty());
    }
}
