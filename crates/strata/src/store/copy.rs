//! Copying a whole store into an empty one, whatever the two backends
//! (`strata migrate`): sessions, active and archived memories with their
//! history, vectors and access counts, the context log and the audit
//! trail (entries, anchor and head as they are); then both are
//! read back and compared, count by count and by a SHA-256 over everything
//! a store holds ([`StoreDigest`]).

use sha2::{Digest, Sha256};

use super::{ImportItem, ImportRules, OnConflict, Query, Session, Store};
use crate::Result;
use crate::error::Error;
use crate::scope::Fence;

/// What a store holds, counted and hashed: equal digests mean the same
/// memories (every field, vectors included), archive marks, history,
/// sessions and context log, in any backend.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreDigest {
    /// Active memories.
    pub memories: u64,
    /// Archived memories.
    pub archived: u64,
    /// History versions.
    pub history: u64,
    /// Sessions.
    pub sessions: u64,
    /// Logged context packages.
    pub context_logs: u64,
    /// Audit entries kept.
    #[serde(default)]
    pub audit_entries: u64,
    /// SHA-256 (hex) over all of it, in a canonical order.
    pub sha256: String,
}

/// Memories imported per transaction while copying.
const CHUNK: usize = 500;

/// Audit entries read and written per round trip while copying.
const AUDIT_PAGE: usize = 5_000;

/// Counts and hashes everything `s` holds.
pub fn store_digest(s: &dyn Store) -> Result<StoreDigest> {
    let now = jiff::Timestamp::now();
    let mut d = StoreDigest::default();
    let mut lines: Vec<String> = Vec::new();
    let json = |v: &dyn erased::Ser| v.line();
    for m in s.query(&Query::everything(now).include_expired(true))? {
        d.memories += 1;
        let h = s.history(&m.id)?;
        d.history += h.len() as u64;
        lines.push(format!("a {}", json(&(&m, &h))));
    }
    for a in s.query_archived(&Query::everything(now))? {
        d.archived += 1;
        let h = s.history(&a.memory.id)?;
        d.history += h.len() as u64;
        lines.push(format!("r {}", json(&(&a, &h))));
    }
    for x in s.list_sessions()? {
        d.sessions += 1;
        lines.push(format!("s {}", json(&x)));
    }
    for (id, at, doc) in s.context_logs()? {
        d.context_logs += 1;
        lines.push(format!("c {}", json(&(id, at.as_millisecond(), doc))));
    }
    lines.push(format!("uc {}", json(&s.audit_chain()?)));
    let mut after = 0;
    loop {
        let page = s.audit_range(after, AUDIT_PAGE)?;
        for e in &page {
            d.audit_entries += 1;
            lines.push(format!("u {}", json(e)));
            after = e.seq;
        }
        if page.len() < AUDIT_PAGE {
            break;
        }
    }
    lines.sort_unstable();
    let mut h = Sha256::new();
    for l in &lines {
        h.update(l.as_bytes());
        h.update(b"\n");
    }
    d.sha256 = h
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok(d)
}

/// Serialising the digest's parts through one closure.
mod erased {
    pub trait Ser {
        fn line(&self) -> String;
    }
    impl<T: serde::Serialize> Ser for T {
        fn line(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

/// Copies everything `from` holds into `to`, which must hold nothing, then
/// checks that both hold the same ([`store_digest`]). `progress` hears
/// `(memories copied, memories in all)`. Returns the digest both share.
///
/// Each chunk of memories is one transaction in `to`; a failure midway
/// leaves `to` partly filled (it was empty: drop it and run again), never
/// `from` changed.
pub fn copy_store(
    from: &dyn Store,
    to: &dyn Store,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<StoreDigest> {
    let held = to.stats()?;
    if held.memories + held.archived + held.history + held.sessions > 0
        || !to.context_logs()?.is_empty()
        || to.audit_chain()?.head_seq > 0
    {
        return Err(Error::InvalidConfig(format!(
            "the destination is not empty ({} memories, {} archived, {} sessions): migrate writes only into an empty store",
            held.memories, held.archived, held.sessions
        )));
    }
    let want = store_digest(from)?;
    let now = jiff::Timestamp::now();
    let sessions = from.list_sessions()?;
    for s in &sessions {
        // Bytes come back as the memories are imported; the archive mark
        // once they are in.
        to.create_session(&Session {
            bytes: 0,
            archived_at: None,
            ..s.clone()
        })?;
    }
    let mut items: Vec<ImportItem> = Vec::new();
    for m in from.query(&Query::everything(now).include_expired(true))? {
        let history = from.history(&m.id)?;
        items.push(ImportItem {
            line: 0,
            memory: m,
            archived: None,
            history,
        });
    }
    for a in from.query_archived(&Query::everything(now))? {
        let history = from.history(&a.memory.id)?;
        items.push(ImportItem {
            line: 0,
            memory: a.memory,
            archived: Some((a.archived_at, a.reason)),
            history,
        });
    }
    let rules = ImportRules {
        on_conflict: OnConflict::Error,
        fence: Fence::everything(),
        session_max_bytes: 1,
    };
    let total = items.len();
    progress(0, total);
    for (i, chunk) in items.chunks(CHUNK).enumerate() {
        to.import(chunk, &rules)?;
        progress((i * CHUNK + chunk.len()).min(total), total);
    }
    for s in sessions.iter().filter(|s| s.archived_at.is_some()) {
        to.archive_session(&s.id, s.archived_at.unwrap_or(now))?;
    }
    for (id, at, doc) in from.context_logs()? {
        to.log_context(&id, at, &doc)?;
    }
    // The audit trail as it is, hashes and anchor included, so the copy
    // verifies as the source does.
    let chain = from.audit_chain()?;
    let mut after = 0;
    loop {
        let page = from.audit_range(after, AUDIT_PAGE)?;
        to.audit_restore(&chain, &page)?;
        match page.last() {
            Some(e) if page.len() == AUDIT_PAGE => after = e.seq,
            _ => break,
        }
    }
    let got = store_digest(to)?;
    if got != want {
        return Err(Error::Storage {
            backend: "migrate",
            source: format!(
                "the copy differs from the source: source {} memories, {} archived, {} history, {} sessions, {} context logs, {} audit entries, sha256 {}; copy {} memories, {} archived, {} history, {} sessions, {} context logs, {} audit entries, sha256 {}",
                want.memories, want.archived, want.history, want.sessions, want.context_logs, want.audit_entries, want.sha256,
                got.memories, got.archived, got.history, got.sessions, got.context_logs, got.audit_entries, got.sha256
            )
            .into(),
        });
    }
    Ok(got)
}
