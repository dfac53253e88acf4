//! Session compaction: a session near its byte bound has its oldest
//! memories summarised into `summary` memories that name them, and the
//! sources move to the archive (reason `compacted`), from where the cold
//! tier takes them.
//!
//! Two steps, each its own transaction: the summary is written (outside
//! the session, so it needs none of the session's room; its payload names
//! the session and the sources), then the sources are archived. A crash
//! between leaves a summary whose sources are still active: the next
//! compaction of that session archives them first ("finishes" it), and
//! makes no second summary of them.

use super::*;

/// Most sources one summary names (a summary of more says too little of
/// each, and its payload grows with them).
const MAX_SOURCES: usize = 500;

/// The archive reason of a compacted memory.
pub const COMPACTED: &str = "compacted";

/// What compacting one session did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Compaction {
    /// The session.
    pub session: String,
    /// Its bytes before and after.
    pub bytes_before: u64,
    /// …
    pub bytes_after: u64,
    /// Memories archived (reason `compacted`), a half-done earlier
    /// compaction's included.
    pub compacted: usize,
    /// The summaries written (ids).
    pub summaries: Vec<String>,
}

impl Engine {
    /// Compacts session `id` now, whatever its size: its oldest unpinned
    /// memories are summarised and archived until its bytes are at most
    /// `compaction.to` of its bound (nothing when they already are).
    /// Pinned memories stay. An archived, ephemeral or unknown session is
    /// an error naming it.
    pub fn compact_session(&self, id: &str) -> Result<Compaction> {
        model::validate_session_id(id)?;
        if self.is_ephemeral(id) {
            return Err(Error::field(
                "session",
                format!("`{id}` is ephemeral: its ring keeps its last `hot.turns` memories"),
            ));
        }
        let s = self
            .store
            .get_session(id)?
            .ok_or_else(|| Error::SessionNotFound(id.into()))?;
        if s.archived_at.is_some() {
            return Err(Error::SessionArchived(id.into()));
        }
        self.compact(&s, self.now())
    }

    /// Upkeep's pass: every open session at or over `compaction.at` of its
    /// bound. Answers (sessions compacted, memories archived).
    pub(super) fn compact_sessions(&self, now: Timestamp) -> Result<(usize, usize)> {
        if !self.cfg.compaction.enabled {
            return Ok((0, 0));
        }
        let at = self.cfg.compaction.at;
        let mut sessions = 0;
        let mut memories = 0;
        for s in self.store.list_sessions()? {
            if s.archived_at.is_some() || (s.bytes as f64) < at * s.max_bytes as f64 {
                continue;
            }
            let c = self.compact(&s, now)?;
            if c.compacted > 0 {
                sessions += 1;
                memories += c.compacted;
            }
        }
        Ok((sessions, memories))
    }

    fn compact(&self, s: &Session, now: Timestamp) -> Result<Compaction> {
        let mut out = Compaction {
            session: s.id.clone(),
            bytes_before: s.bytes,
            ..Compaction::default()
        };
        // An earlier compaction cut short: its summaries' sources that are
        // still active go now.
        let written = Filter::parse(&json!({
            "kind": "summary",
            "payload.compacted.session": s.id,
        }))?;
        for summary in self
            .store
            .query(&Query::everything(now).filter(written).include_expired(true))?
        {
            let sources: Vec<String> = summary
                .payload
                .as_ref()
                .and_then(|p| p.pointer("/compacted/sources"))
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let still: Vec<String> = self
                .store
                .get_many(&sources)?
                .into_iter()
                .map(|m| m.id)
                .collect();
            out.compacted += self.store.archive(&still, COMPACTED, now)?;
        }
        let target = (self.cfg.compaction.to * s.max_bytes as f64) as u64;
        let mut bytes = self.store.get_session(&s.id)?.map_or(0, |x| x.bytes);
        if bytes > target {
            let mine = Filter::parse(&json!({"session": s.id, "pinned": false}))?;
            let oldest = self.store.query(
                &Query::everything(now)
                    .filter(mine)
                    .include_expired(true)
                    .order(Order::Oldest),
            )?;
            let mut picked: Vec<Memory> = Vec::new();
            for m in oldest {
                if bytes <= target {
                    break;
                }
                bytes = bytes.saturating_sub(m.size_bytes());
                picked.push(m);
            }
            for chunk in picked.chunks(MAX_SOURCES) {
                let summary = self.summary_of(s, chunk)?;
                out.summaries.push(summary.id);
                let ids: Vec<String> = chunk.iter().map(|m| m.id.clone()).collect();
                out.compacted += self.store.archive(&ids, COMPACTED, now)?;
            }
        }
        out.bytes_after = self.store.get_session(&s.id)?.map_or(0, |x| x.bytes);
        Ok(out)
    }

    /// Writes the summary of `sources` (oldest first) of session `s`: in
    /// the session's scope, outside the session, naming both.
    fn summary_of(&self, s: &Session, sources: &[Memory]) -> Result<Memory> {
        // Best first for the summarizer: the most important, then the oldest.
        let mut best: Vec<Memory> = sources.to_vec();
        best.sort_by(|a, b| b.importance.total_cmp(&a.importance));
        let first = sources.first().map(|m| m.created_at);
        let last = sources.last().map(|m| m.created_at);
        let summary =
            crate::context::summarize_memories(self, &best, self.cfg.compaction.summary_tokens);
        let (text, method) = match summary {
            Some(x) => (x.text, x.method),
            None => (String::new(), "none".to_string()),
        };
        let span = match (first, last) {
            (Some(a), Some(b)) => format!(" from {a} to {b}"),
            _ => String::new(),
        };
        let content = format!(
            "Summary of {} earlier memories of session {}{span}:\n{}",
            sources.len(),
            s.id,
            text.trim_end()
        );
        let importance = sources
            .iter()
            .map(|m| m.importance)
            .fold(Kind::Summary.default_importance(), f64::max);
        let ids: Vec<&str> = sources.iter().map(|m| m.id.as_str()).collect();
        self.remember(
            NewMemory::new(s.scope.clone(), content)
                .kind(Kind::Summary)
                .importance(importance)
                .tag("compacted")
                .payload(json!({
                    "compacted": {
                        "session": s.id,
                        "sources": ids,
                        "from": first,
                        "to": last,
                        "method": method,
                    }
                })),
        )
    }
}

impl Engine {
    /// The sessions whose compaction summaries may quote any of `ids`
    /// archived in the store (by id, its index); the cold tier's are found
    /// as forget rewrites their segments.
    pub(super) fn quoted_in_store(&self, ids: &[String]) -> Result<BTreeSet<String>> {
        let now = self.now();
        let mut out = BTreeSet::new();
        for chunk in ids.chunks(Filter::MAX_VALUES) {
            let f = Filter::parse(&json!({"id": {"$in": chunk}}))?;
            let q = Query::everything(now).filter(f).include_expired(true);
            out.extend(compacted_sessions(
                self.store
                    .query_archived(&q)?
                    .into_iter()
                    .map(|a| (a.reason, a.memory)),
            ));
        }
        Ok(out)
    }

    /// Forgetting `ids` reaches the compaction summaries of `sessions` that
    /// quote them: each is replaced by one without their lines and names (a
    /// new memory; the old one is forgotten with its history), or forgotten
    /// when nothing of it is left.
    pub(super) fn unquote(&self, ids: &[String], sessions: &BTreeSet<String>) -> Result<()> {
        let gone: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let now = self.now();
        for session in sessions {
            let f = Filter::parse(&json!({
                "kind": "summary",
                "payload.compacted.session": session,
            }))?;
            let q = Query::everything(now).filter(f).include_expired(true);
            for old in self.store.query(&q)? {
                let Some(mut payload) = old.payload.clone() else {
                    continue;
                };
                let Some(sources) = payload
                    .pointer_mut("/compacted/sources")
                    .and_then(|v| v.as_array_mut())
                else {
                    continue;
                };
                let before = sources.len();
                sources.retain(|x| x.as_str().is_none_or(|id| !gone.contains(id)));
                if sources.len() == before {
                    continue;
                }
                let left = sources.len();
                let mut lines = old.content.lines();
                let head = lines.next().unwrap_or_default().to_string();
                let kept: Vec<&str> = lines
                    .filter(|l| !gone.iter().any(|id| l.contains(id)))
                    .collect();
                self.forget_everywhere(std::slice::from_ref(&old.id))?;
                if left == 0 || kept.is_empty() {
                    continue;
                }
                let mut new =
                    NewMemory::new(old.scope.clone(), format!("{head}\n{}", kept.join("\n")))
                        .kind(Kind::Summary)
                        .importance(old.importance)
                        .payload(payload);
                new.tags = old.tags.clone();
                new.created_at = Some(old.created_at);
                self.remember(new)?;
            }
        }
        Ok(())
    }
}

/// The sessions of the memories archived as compacted among `archived`
/// (reason, memory).
pub(super) fn compacted_sessions(
    archived: impl IntoIterator<Item = (String, Memory)>,
) -> BTreeSet<String> {
    archived
        .into_iter()
        .filter(|(reason, _)| reason == COMPACTED)
        .filter_map(|(_, m)| m.session)
        .collect()
}
