//! JSONL export and import: the human-readable, lossless interchange format.
//!
//! One memory per line, every field of [`Memory`] at the top level, plus
//! `archived` (`{"at", "reason"}`) for archived memories and `history` (the
//! earlier versions, oldest first) when there are any. Export then import
//! into an empty store, then export again, gives the same bytes.
//!
//! A line may leave `checksum` out (or give `null`): import computes it
//! from `content` and `payload`, for lines written by hand or by another
//! tool. A checksum that is given must match, else the line is refused.
//!
//! Import reads and validates every line before it writes anything; the
//! first bad line is an error naming its number and field, and the store is
//! unchanged. Then everything is stored in one transaction.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::engine::{ArchiveMark, Engine};
use crate::error::Error;
use crate::filter::Filter;
use crate::model::Memory;
use crate::scope::{Fence, View};
use crate::store::{ImportCounts, ImportItem, ImportRules, OnConflict, Order, Query};

/// What to export. The default is a full backup: every scope, sensitive
/// and archived memories and every earlier version, so that importing it
/// into an empty store gives the same store back. Each `include_*` set to
/// `false` leaves that part out (and the report counts what was left out).
#[derive(Clone, Debug)]
pub struct Export {
    /// Scopes to export; `None` exports every scope.
    pub view: Option<View>,
    /// Only this session's memories.
    pub session: Option<String>,
    /// Include sensitive memories (and sensitive earlier versions).
    pub include_sensitive: bool,
    /// Include archived memories.
    pub include_archived: bool,
    /// Include earlier versions.
    pub include_history: bool,
}

impl Default for Export {
    fn default() -> Export {
        Export::user_data(None, None)
    }
}

impl Export {
    /// Everything about a scope subtree or session: sensitive, archived and
    /// history included (`export --user-data`; the default's parts).
    pub fn user_data(view: Option<View>, session: Option<String>) -> Export {
        Export {
            view,
            session,
            include_sensitive: true,
            include_archived: true,
            include_history: true,
        }
    }
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportReport {
    /// Lines written.
    pub memories: usize,
    /// Of those, archived.
    pub archived: usize,
    /// Sensitive memories left out.
    pub sensitive_skipped: usize,
    /// Archived memories left out.
    #[serde(default)]
    pub archived_skipped: usize,
    /// Earlier versions written (inside the lines' `history`).
    #[serde(default)]
    pub history: usize,
    /// Earlier versions left out.
    #[serde(default)]
    pub history_skipped: usize,
}

#[derive(Serialize)]
struct LineOut<'a> {
    #[serde(flatten)]
    memory: &'a Memory,
    #[serde(skip_serializing_if = "Option::is_none")]
    archived: Option<ArchiveMark>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    history: Vec<Memory>,
}

/// Gives a memory object without a `checksum` (or with `null`) the one
/// its `content` and `payload` have. Without a string `content` it is left
/// as it is, for deserialization to name the field.
fn fill_checksum(obj: &mut serde_json::Map<String, serde_json::Value>) {
    if !obj.get("checksum").is_none_or(serde_json::Value::is_null) {
        return;
    }
    let Some(content) = obj.get("content").and_then(serde_json::Value::as_str) else {
        return;
    };
    let payload = obj.get("payload").filter(|p| !p.is_null());
    let sum = crate::model::checksum(content, payload);
    obj.insert("checksum".into(), sum.into());
}

/// Parses one export line.
pub fn parse_line(line: &str) -> std::result::Result<ImportItem, String> {
    let mut v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let obj = v.as_object_mut().ok_or("expected a JSON object")?;
    let archived = match obj.remove("archived") {
        None | Some(serde_json::Value::Null) => None,
        Some(a) => {
            let m: ArchiveMark = serde_json::from_value(a).map_err(|e| format!("archived: {e}"))?;
            if m.reason.is_empty() {
                return Err("archived.reason: is empty".into());
            }
            Some((m.at, m.reason))
        }
    };
    let history = match obj.remove("history") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(mut h) => {
            if let Some(entries) = h.as_array_mut() {
                entries
                    .iter_mut()
                    .filter_map(serde_json::Value::as_object_mut)
                    .for_each(fill_checksum);
            }
            serde_json::from_value::<Vec<Memory>>(h).map_err(|e| format!("history: {e}"))?
        }
    };
    fill_checksum(obj);
    let memory: Memory = serde_json::from_value(v).map_err(|e| e.to_string())?;
    memory.validate().map_err(|e| e.to_string())?;
    for h in &history {
        if h.id != memory.id {
            return Err(format!(
                "history: entry id `{}` differs from the memory's id `{}`",
                h.id, memory.id
            ));
        }
        if h.version >= memory.version {
            return Err(format!(
                "history: version {} is not older than the memory's version {}",
                h.version, memory.version
            ));
        }
        h.validate()
            .map_err(|e| format!("history version {}: {e}", h.version))?;
    }
    Ok(ImportItem {
        line: 0,
        memory,
        archived,
        history,
    })
}

impl Engine {
    /// Writes memories as JSONL; `progress` is called after each line.
    pub fn export(
        &self,
        req: &Export,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(usize),
    ) -> Result<ExportReport> {
        self.settle_accesses();
        let now = self.now_for_export();
        let mut q = match &req.view {
            Some(v) => Query::view(v.clone(), now),
            None => Query::everything(now),
        }
        .order(Order::Oldest)
        .include_expired(true);
        if let Some(s) = &req.session {
            crate::model::validate_session_id(s)?;
            q.filter = Filter::parse(&serde_json::json!({"session": s}))?;
        }
        let mut lines: Vec<(Memory, Option<ArchiveMark>)> = self
            .store()
            .query(&q)?
            .into_iter()
            .map(|m| (m, None))
            .collect();
        let mut rep = ExportReport::default();
        if !req.include_archived {
            rep.archived_skipped = self.archived_everywhere(&q)?.len();
        } else {
            lines.extend(self.archived_everywhere(&q)?.into_iter().map(|a| {
                (
                    a.memory,
                    Some(ArchiveMark {
                        at: a.archived_at,
                        reason: a.reason,
                    }),
                )
            }));
            lines.sort_by(|a, b| {
                a.0.created_at
                    .cmp(&b.0.created_at)
                    .then_with(|| a.0.id.cmp(&b.0.id))
            });
        }
        let w = |e: std::io::Error| Error::io("writing export", e);
        for (m, archived) in lines {
            if m.sensitive && !req.include_sensitive {
                rep.sensitive_skipped += 1;
                continue;
            }
            let mut history = self.history(&m.id)?;
            if !req.include_history {
                rep.history_skipped += history.len();
                history.clear();
            }
            if !req.include_sensitive {
                // An earlier version may have been sensitive.
                let before = history.len();
                history.retain(|h| !h.sensitive);
                rep.history_skipped += before - history.len();
            }
            rep.history += history.len();
            rep.archived += archived.is_some() as usize;
            let line = LineOut {
                memory: &m,
                archived,
                history,
            };
            serde_json::to_writer(&mut *out, &line)
                .map_err(|e| Error::io("writing export", e.into()))?;
            out.write_all(b"\n").map_err(w)?;
            rep.memories += 1;
            progress(rep.memories);
        }
        out.flush().map_err(w)?;
        Ok(rep)
    }

    /// Reads JSONL written by [`Engine::export`]. Every line is validated
    /// first; nothing is stored unless all are valid. `progress` is called
    /// with the bytes read so far.
    pub fn import(
        &self,
        input: &mut dyn BufRead,
        on_conflict: OnConflict,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ImportCounts> {
        self.import_within(input, on_conflict, &Fence::everything(), progress)
    }

    /// Like [`Engine::import`] for a caller that may touch only the scopes
    /// inside `fence` (a server's token): every line's scope, its history's
    /// and its session's must lie inside; a session the import creates
    /// takes the line's scope and the configured bound, and an archived or
    /// full session refuses active lines, as for any write. A line whose id
    /// belongs to a memory outside the fence is stored under a fresh id:
    /// the other memory is neither changed nor revealed.
    pub fn import_within(
        &self,
        input: &mut dyn BufRead,
        on_conflict: OnConflict,
        fence: &Fence,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ImportCounts> {
        let mut items = Vec::new();
        let mut ids = std::collections::HashSet::new();
        // Vector lengths by model: what the store holds, then what earlier
        // lines brought. One line's vector must not fix a model's length
        // for everyone else.
        let mut dims: std::collections::HashMap<String, usize> = self
            .store()
            .vector_models()?
            .into_iter()
            .map(|(model, dim, _)| (model, dim))
            .collect();
        if let Some(Ok(Some(e))) = self.embedder.get() {
            dims.entry(e.model().to_string()).or_insert(e.dim());
        }
        let mut read = 0u64;
        let mut line = Vec::new();
        let mut n = 0usize;
        loop {
            line.clear();
            // Bytes, not `read_line`: text that is not UTF-8 is the input's
            // fault and names its line, where `read_line` fails with an I/O
            // error (a server's 500).
            let got = input
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io("reading import", e))?;
            if got == 0 {
                break;
            }
            n += 1;
            read += got as u64;
            progress(read);
            let text = std::str::from_utf8(&line)
                .map_err(|e| Error::InvalidImport {
                    line: n,
                    reason: format!("not UTF-8: {e}"),
                })?
                .trim();
            if text.is_empty() {
                continue;
            }
            let mut item =
                parse_line(text).map_err(|reason| Error::InvalidImport { line: n, reason })?;
            item.line = n;
            if !ids.insert(item.memory.id.clone()) {
                return Err(Error::InvalidImport {
                    line: n,
                    reason: format!("id `{}` appears twice in the input", item.memory.id),
                });
            }
            for m in std::iter::once(&item.memory).chain(&item.history) {
                let Some(e) = &m.embedding else { continue };
                let want = *dims.entry(e.model.clone()).or_insert(e.vector.len());
                if e.vector.len() != want {
                    return Err(Error::InvalidImport {
                        line: n,
                        reason: format!(
                            "embedding: a vector of length {} from `{}`, whose vectors have length {want}",
                            e.vector.len(),
                            e.model
                        ),
                    });
                }
            }
            // Imported text meets the `[[secrets]]` rules as written text
            // does, every version of it.
            let at = format!("line {n}: ");
            self.screen(&at, &mut item.memory)?;
            for h in &mut item.history {
                self.screen(&at, h)?;
            }
            items.push(item);
        }
        let rules = ImportRules {
            on_conflict,
            fence: fence.clone(),
            session_max_bytes: self.cfg.session_max_bytes,
        };
        self.thaw_for_import(&mut items, fence)?;
        let counts = self.store().import(&items, &rules)?;
        // Learning examines what an import brought at its next run; the
        // import stands whatever happens to that mark.
        if let Err(e) = self.learn_later(items.iter().map(|i| &i.memory)) {
            eprintln!("strata: learning: imported memories not marked for the next run: {e}");
        }
        Ok(counts)
    }
}
