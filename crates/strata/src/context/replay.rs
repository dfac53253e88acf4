//! Logging assembled packages and rebuilding them later.
//!
//! A log record holds the resolved profile, the request, and each item's id,
//! version and cut, never memory content, so `forget` leaves nothing behind
//! in the log. [`Engine::replay`] rebuilds the package from those versions
//! (the current row, the history of superseded versions, or the archive) and
//! reports every memory that changed since; the rebuilt package has the
//! logged id exactly when every version was still available.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::package::apply_cut;
use super::profile::{Profile, Render};
use super::render::finish;
use super::summary;
use super::{
    ContextItem, ContextPackage, ContextRequest, Cut, SourceUsage, Summary, SummaryPick, Why,
};
use crate::Result;
use crate::engine::Engine;
use crate::error::Error;
use crate::model::Memory;

/// What the log keeps of one item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct LogItem {
    id: String,
    version: u64,
    source: usize,
    why: Why,
    score: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cut: Option<Cut>,
}

/// What the log keeps of the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct LogSummary {
    method: String,
    ids: Vec<String>,
    picks: Vec<SummaryPick>,
}

/// One log record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct LogDoc {
    id: String,
    now: Timestamp,
    profile: Profile,
    request: ContextRequest,
    render: Render,
    items: Vec<LogItem>,
    summary: Option<LogSummary>,
    per_source: Vec<SourceUsage>,
    available_tokens: u64,
}

/// A memory that changed since a package was logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Memory id.
    pub id: String,
    /// Version the package used.
    pub logged_version: u64,
    /// `updated to version N`, `archived`, or `forgotten`.
    pub now: String,
    /// Whether the logged version could still be used for the rebuild.
    pub rebuilt: bool,
}

/// The result of [`Engine::replay`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// The rebuilt package.
    pub package: ContextPackage,
    /// The id that was logged.
    pub logged_id: String,
    /// Whether the rebuild is the logged package (same id).
    pub exact: bool,
    /// Memories that changed since.
    pub changes: Vec<Change>,
    /// Anything else the rebuild could not reproduce.
    pub notes: Vec<String>,
    /// The request that was logged.
    pub request: ContextRequest,
}

pub(crate) fn log(
    engine: &Engine,
    prof: &Profile,
    req: &ContextRequest,
    render: Render,
    now: Timestamp,
    pkg: &ContextPackage,
) -> Result<()> {
    let mut request = ContextRequest {
        log: false,
        ..req.clone()
    };
    // The query and placeholder values are a writer's text that the log
    // keeps: screened as memories are, under the strictest `[[secrets]]`
    // action of any rule (the request may concern any scope).
    if let Some(rule) = crate::secrets::strictest(&engine.config().secrets) {
        request.query = crate::secrets::screen_text(&rule, "query", &request.query)?;
        for (name, value) in request.vars.iter_mut() {
            *value = crate::secrets::screen_text(&rule, &format!("vars.{name}"), value)?;
        }
    }
    let doc = LogDoc {
        id: pkg.id.clone(),
        now,
        profile: prof.clone(),
        request,
        render,
        items: pkg
            .items
            .iter()
            .map(|it| LogItem {
                id: it.id.clone(),
                version: it.version,
                source: it.source,
                why: it.why,
                score: it.score,
                cut: it.cut,
            })
            .collect(),
        summary: pkg.summary.as_ref().map(|s| LogSummary {
            method: s.method.clone(),
            ids: s.ids.clone(),
            picks: s.picks.clone(),
        }),
        per_source: pkg.per_source.clone(),
        available_tokens: pkg.available_tokens,
    };
    let text = serde_json::to_string(&doc).map_err(|e| Error::field("context log", e))?;
    engine.store().log_context(&pkg.id, engine.now(), &text)
}

/// Where a memory version can still be found.
fn version_of(engine: &Engine, id: &str, version: u64) -> Result<(Option<Memory>, Option<String>)> {
    let current = engine.store().get(id)?;
    let state = match &current {
        Some(m) if m.version == version => return Ok((current, None)),
        Some(m) => format!("updated to version {}", m.version),
        None => match engine.get_archived(id)? {
            Some(a) if a.memory.version == version => {
                return Ok((Some(a.memory), Some("archived".into())));
            }
            Some(a) => format!("archived at version {}", a.memory.version),
            None => "forgotten".into(),
        },
    };
    let old = engine
        .store()
        .history(id)?
        .into_iter()
        .find(|m| m.version == version);
    Ok((old, Some(state)))
}

impl Engine {
    /// Rebuilds a logged package from the versions it used, and says which
    /// memories have changed since.
    pub fn replay(&self, package_id: &str) -> Result<Replay> {
        let text = self
            .store()
            .context_log(package_id)?
            .ok_or_else(|| Error::PackageNotFound(package_id.to_string()))?;
        let doc: LogDoc =
            serde_json::from_str(&text).map_err(|e| Error::field("context log", e))?;
        let counter = self.token_counter();
        let mut changes = Vec::new();
        let mut notes = Vec::new();
        let mut items = Vec::with_capacity(doc.items.len());
        let mut seen = std::collections::HashMap::new();
        for li in &doc.items {
            let (m, state) = version_of(self, &li.id, li.version)?;
            if let Some(s) = state {
                changes.push(Change {
                    id: li.id.clone(),
                    logged_version: li.version,
                    now: s,
                    rebuilt: m.is_some(),
                });
            }
            let Some(m) = m else { continue };
            seen.insert((m.id.clone(), m.version), m.content.clone());
            let cut = li.cut.map(|c| {
                let text = apply_cut(counter, &m.content, c);
                let t = counter.count(&text);
                (c, text, t)
            });
            items.push(ContextItem::of(m, li.source, li.why, li.score, cut));
        }
        let summary = match &doc.summary {
            None => None,
            Some(s) if s.method == "llm" => {
                notes.push(
                    "the LLM summary is not logged (it may quote forgotten memories); rebuilt without it"
                        .into(),
                );
                None
            }
            Some(s) => {
                let lookup = |id: &str, v: u64| -> Option<String> {
                    if let Some(c) = seen.get(&(id.to_string(), v)) {
                        return Some(c.clone());
                    }
                    match version_of(self, id, v) {
                        Ok((Some(m), _)) => Some(m.content),
                        _ => None,
                    }
                };
                let counts = summary::Counts {
                    tokens: counter,
                    cache: self.count_cache(),
                };
                match summary::rebuild(&counts, &s.picks, &lookup) {
                    Some((text, tokens)) => Some(Summary {
                        method: s.method.clone(),
                        tokens: counter.count(&super::render::markdown_heading(
                            super::render::SUMMARY_TITLE,
                        )) + 1
                            + tokens,
                        text,
                        ids: s.ids.clone(),
                        picks: s.picks.clone(),
                        note: None,
                    }),
                    None => {
                        notes.push(
                            "a memory the summary quoted is no longer available; rebuilt without the summary"
                                .into(),
                        );
                        None
                    }
                }
            }
        };
        let cands: Vec<usize> = doc.per_source.iter().map(|u| u.items + u.dropped).collect();
        let mut pkg = ContextPackage {
            id: String::new(),
            profile: doc.profile.id.clone(),
            render: doc.render,
            max_tokens: doc.profile.max_tokens,
            total_tokens: 0,
            available_tokens: doc.available_tokens,
            compression_ratio: 0.0,
            dropped: 0,
            per_source: doc.per_source.clone(),
            items,
            summary,
        };
        finish(counter, self.count_cache(), &mut pkg, &cands);
        Ok(Replay {
            exact: pkg.id == doc.id,
            logged_id: doc.id,
            package: pkg,
            changes,
            notes,
            request: doc.request,
        })
    }
}
