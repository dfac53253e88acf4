//! Writes inside a transaction: a row with its text-index entries, scope
//! count and vector stamp together; history; archive moves; deletes
//! everywhere; session byte accounting.

use std::collections::HashMap;

use super::*;

/// Adds `delta` bytes to a session inside `tx`, enforcing its bound on growth.
pub(super) fn session_delta(
    tx: &Connection,
    session: Option<&str>,
    delta: i64,
    at: Option<Timestamp>,
) -> Result<()> {
    let Some(id) = session else { return Ok(()) };
    let row: Option<(i64, i64, Option<i64>)> = tx
        .prepare_cached("SELECT bytes, max_bytes, archived_at FROM sessions WHERE id = ?")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (bytes, max, archived) = row.ok_or_else(|| Error::SessionNotFound(id.into()))?;
    crate::store::check_session_delta(id, bytes as u64, max as u64, archived.is_some(), delta)?;
    let at = at.map(|t| t.as_millisecond());
    tx.prepare_cached(
        "UPDATE sessions SET bytes = MAX(0, bytes + ?), last_activity_at = MAX(last_activity_at, COALESCE(?, last_activity_at)) WHERE id = ?",
    )?
    .execute(params![delta, at, id])?;
    Ok(())
}

pub(super) fn fts_insert(tx: &Connection, rowid: i64, m: &Memory) -> Result<()> {
    fts_add(tx, rowid, &m.content, &m.scope)?;
    count_scope(tx, &m.scope, 1)?;
    stamp_vector(tx, rowid, m)
}

/// Indexes a row holding `content` in `scope`: the scope's terms and the
/// scoped terms, the scope numbered now if it is new ([`fts_remove`]
/// takes them out).
pub(super) fn fts_add(tx: &Connection, rowid: i64, content: &str, scope: &Scope) -> Result<()> {
    let id = fts::scope_id(tx, scope)?;
    text_queue::change(
        tx,
        rowid,
        false,
        scope_terms_cached(scope),
        fts::scoped_terms(content, id),
    )
}

/// [`fts::scope_terms`], remembered per thread for the last few hundred
/// scopes: batches write many memories to few scopes.
fn scope_terms_cached(scope: &Scope) -> String {
    thread_local! {
        static TERMS: std::cell::RefCell<std::collections::HashMap<String, String>> = Default::default();
    }
    TERMS.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() > 256 {
            t.clear();
        }
        t.entry(scope.to_string())
            .or_insert_with(|| fts::scope_terms(scope))
            .clone()
    })
}

/// A row that enters `memories` with a vector (restore, import, a key
/// superseded by an import) gets the model's next version, so the vector
/// index picks it up.
pub(super) fn stamp_vector(tx: &Connection, rowid: i64, m: &Memory) -> Result<()> {
    let Some(e) = &m.embedding else {
        return Ok(());
    };
    tx.prepare_cached("INSERT OR IGNORE INTO vector_models (model, dim) VALUES (?, ?)")?
        .execute(params![e.model, e.vector.len() as i64])?;
    let dim: i64 = tx
        .prepare_cached("SELECT dim FROM vector_models WHERE model = ?")?
        .query_row([&e.model], |r| r.get(0))?;
    search::check_vector(&m.id, e, dim as usize)?;
    let v: i64 = tx
        .prepare_cached(
            "UPDATE vector_models SET version = version + 1 WHERE model = ? RETURNING version",
        )?
        .query_row([&e.model], |r| r.get(0))?;
    tx.prepare_cached("UPDATE memories SET vector_seq = ? WHERE rowid = ?")?
        .execute(params![v, rowid])?;
    Ok(())
}

/// Removes a row's entries from the index; `old` must be the memory exactly
/// as it was indexed.
pub(super) fn fts_delete(tx: &Connection, rowid: i64, old: &Memory) -> Result<()> {
    fts_remove(tx, rowid, &old.content, &old.scope)?;
    count_scope(tx, &old.scope, -1)
}

/// Removes the index entries of a row holding `content` in `scope`, which
/// must be what [`fts_add`] indexed: FTS5's `'delete'` is given the old
/// values. A scope without a number was never indexed: the file is corrupt,
/// and nothing is removed.
fn fts_remove(tx: &Connection, rowid: i64, content: &str, scope: &Scope) -> Result<()> {
    let Some(id) = fts::known_scope_id(tx, scope)? else {
        return Err(Error::Corrupt {
            what: format!("memory {rowid}: scope {scope} has no number in scope_ids"),
            source: "its text index entries cannot be named".into(),
        });
    };
    text_queue::change(
        tx,
        rowid,
        true,
        scope_terms_cached(scope),
        fts::scoped_terms(content, id),
    )
}

/// The positions of `ids` in the order of their rows in `memories`, those
/// without an active row last. FTS5 writes its pending changes out as a
/// new segment whenever a change names a rowid below the one before it,
/// so a batch of deletes taken in any other order writes (and later
/// merges) a segment per memory (docs/history/performance-log.md,
/// "Batches of deletes write one segment").
pub(super) fn in_row_order<'a>(
    tx: &Connection,
    ids: impl Iterator<Item = &'a str>,
) -> Result<Vec<usize>> {
    let mut st = tx.prepare_cached("SELECT rowid FROM memories WHERE id = ?")?;
    let mut keyed = Vec::new();
    for (i, id) in ids.enumerate() {
        let row: Option<i64> = st.query_row([id], |r| r.get(0)).optional()?;
        keyed.push((row.unwrap_or(i64::MAX), i));
    }
    keyed.sort_unstable();
    Ok(keyed.into_iter().map(|(_, i)| i).collect())
}

/// Keeps `scope_counts` (active memories per scope) in step with the rows
/// entering and leaving `memories`; a scope's row goes when it reaches 0.
pub(super) fn count_scope(tx: &Connection, scope: &Scope, delta: i64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO scope_counts (scope, n) VALUES (?1, ?2) ON CONFLICT (scope) DO UPDATE SET n = n + ?2",
    )?
    .execute(params![scope.as_str(), delta])?;
    if delta < 0 {
        tx.prepare_cached("DELETE FROM scope_counts WHERE scope = ? AND n <= 0")?
            .execute([scope.as_str()])?;
    }
    Ok(())
}

pub(super) fn get_active(tx: &Connection, id: &str) -> Result<Option<(i64, Memory)>> {
    Ok(tx
        .prepare_cached(&format!("SELECT {COLS}, rowid FROM memories WHERE id = ?"))?
        .query_row([id], |r| Ok((r.get(24)?, read_memory(r)?)))
        .optional()?)
}

pub(super) fn push_history(tx: &Connection, old: &Memory) -> Result<()> {
    let doc = serde_json::to_string(old).map_err(|e| Error::field("history", e))?;
    tx.prepare_cached("INSERT OR REPLACE INTO history (id, version, doc) VALUES (?, ?, ?)")?
        .execute(params![old.id, old.version as i64, doc])?;
    Ok(())
}

/// Stores one memory inside `tx`. `check_archive` may be false only when the
/// archive is known to be empty in this transaction.
pub(super) fn put_in(tx: &Connection, m: Memory, check_archive: bool) -> Result<Put> {
    if let Some(key) = &m.key {
        let existing: Option<String> = tx
            .prepare_cached("SELECT id FROM memories WHERE scope = ? AND key = ?")?
            .query_row(params![m.scope.as_str(), key], |r| r.get(0))
            .optional()?;
        if let Some(old_id) = existing {
            let (rowid, old) =
                get_active(tx, &old_id)?.ok_or_else(|| Error::NotFound(old_id.clone()))?;
            let new = crate::store::superseding(&old, m);
            for (session, delta, at) in crate::store::session_deltas(&old, &new) {
                session_delta(tx, session, delta, at)?;
            }
            push_history(tx, &old)?;
            replace_row(tx, rowid, &old, &new)?;
            return Ok(Put::Superseded(new));
        }
    }
    let archived = check_archive
        && tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM archive WHERE id = ?)")?
            .query_row([&m.id], |r| r.get::<_, bool>(0))?;
    if archived {
        return Err(Error::DuplicateId(m.id.clone()));
    }
    session_delta(
        tx,
        m.session.as_deref(),
        m.size_bytes() as i64,
        Some(m.updated_at),
    )?;
    let inserted = insert_row(tx, &m);
    match inserted {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(e, msg))
            if e.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            if msg.as_deref().is_some_and(|s| s.contains("memories.id")) {
                return Err(Error::DuplicateId(m.id.clone()));
            }
            return Err(rusqlite::Error::SqliteFailure(e, msg).into());
        }
        Err(e) => return Err(e.into()),
    }
    let rowid = tx.last_insert_rowid();
    fts_insert(tx, rowid, &m)?;
    Ok(Put::Inserted(m))
}

pub(super) fn replace_row(tx: &Connection, rowid: i64, old: &Memory, m: &Memory) -> Result<()> {
    let sets = COLS
        .split(", ")
        .map(|c| format!("{c} = ?"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut p = memory_params(m);
    p.push(SqlValue::Integer(rowid));
    tx.prepare_cached(&format!("UPDATE memories SET {sets} WHERE rowid = ?"))?
        .execute(params_from_iter(p))?;
    fts_delete(tx, rowid, old)?;
    fts_insert(tx, rowid, m)?;
    Ok(())
}

/// Moves the active memories among `ids` to the archive; returns how
/// many moved. Every row moves first, and then their text index entries
/// go, in rowid order: FTS5 writes its pending changes out as a segment
/// at each statement that takes a statement journal (the `INSERT …
/// SELECT` of a move) and at each change to a lower rowid than the one
/// before, so interleaved, a batch would write a segment per memory.
pub(super) fn archive_in(
    tx: &Connection,
    ids: &[String],
    reason: &str,
    at: Timestamp,
) -> Result<usize> {
    let mut moved = Vec::new();
    for id in ids {
        moved.extend(archive_row(tx, id, reason, at)?);
    }
    moved.sort_unstable_by_key(|(rowid, _)| *rowid);
    for (rowid, m) in &moved {
        fts_delete(tx, *rowid, m)?;
    }
    Ok(moved.len())
}

/// Moves an active memory's row to the archive; returns its rowid and the
/// memory, whose text index entries are still to be removed.
fn archive_row(
    tx: &Connection,
    id: &str,
    reason: &str,
    at: Timestamp,
) -> Result<Option<(i64, Memory)>> {
    let Some((rowid, m)) = get_active(tx, id)? else {
        return Ok(None);
    };
    session_delta(tx, m.session.as_deref(), -(m.size_bytes() as i64), None)?;
    tx.prepare_cached(&format!(
        "INSERT INTO archive ({COLS}, archived_at, reason) SELECT {COLS}, ?, ? FROM memories WHERE rowid = ?"
    ))?
    .execute(params![at.as_millisecond(), reason, rowid])?;
    tx.prepare_cached("DELETE FROM memories WHERE rowid = ?")?
        .execute([rowid])?;
    Ok(Some((rowid, m)))
}

/// What [`delete_moved_in`] deleted.
pub(super) struct MovedOut {
    /// Its vector model and row, when it had a vector.
    pub vector: Option<(String, i64)>,
}

/// Deletes a memory moved to the cold tier, active or archived, with its
/// history, when the store holds it at `version` (`None`, nothing done,
/// when it does not). Reads just the columns the delete needs; the scope
/// counts of the active rows deleted are added up in `per_scope`, for the
/// caller to apply once ([`count_scope`]).
pub(super) fn delete_moved_in(
    tx: &Connection,
    id: &str,
    version: u64,
    per_scope: &mut HashMap<String, i64>,
) -> Result<Option<MovedOut>> {
    type Row = (
        i64,
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let row: Option<Row> = tx
        .prepare_cached(
            "SELECT rowid, version, content, scope, session, payload, embedding_model
             FROM memories WHERE id = ?",
        )?
        .query_row([id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?;
    let out = match row {
        Some((_, v, ..)) if v as u64 != version => return Ok(None),
        Some((rowid, _, content, scope, session, payload, model)) => {
            if let Some(s) = &session {
                // As `Memory::size_bytes` counts it: the payload is stored
                // as its compact JSON.
                let size = content.len() + payload.as_ref().map_or(0, String::len);
                tx.prepare_cached("UPDATE sessions SET bytes = MAX(0, bytes - ?) WHERE id = ?")?
                    .execute(params![size as i64, s])?;
            }
            tx.prepare_cached("DELETE FROM memories WHERE rowid = ?")?
                .execute([rowid])?;
            fts_remove(tx, rowid, &content, &Scope::parse(&scope)?)?;
            *per_scope.entry(scope).or_default() += 1;
            MovedOut {
                vector: model.map(|m| (m, rowid)),
            }
        }
        None => {
            let held: Option<i64> = tx
                .prepare_cached("SELECT version FROM archive WHERE id = ?")?
                .query_row([id], |r| r.get(0))
                .optional()?;
            if held.map(|v| v as u64) != Some(version) {
                return Ok(None);
            }
            tx.prepare_cached("DELETE FROM archive WHERE id = ?")?
                .execute([id])?;
            MovedOut { vector: None }
        }
    };
    tx.prepare_cached("DELETE FROM history WHERE id = ?")?
        .execute([id])?;
    Ok(Some(out))
}

/// Deletes one memory everywhere: row, text index, archive, history.
pub(super) fn delete_in(tx: &Connection, id: &str) -> Result<bool> {
    let mut found = false;
    if let Some((rowid, m)) = get_active(tx, id)? {
        if let Some(s) = &m.session {
            tx.prepare_cached("UPDATE sessions SET bytes = MAX(0, bytes - ?) WHERE id = ?")?
                .execute(params![m.size_bytes() as i64, s])?;
        }
        tx.prepare_cached("DELETE FROM memories WHERE rowid = ?")?
            .execute([rowid])?;
        fts_delete(tx, rowid, &m)?;
        found = true;
    }
    found |= tx
        .prepare_cached("DELETE FROM archive WHERE id = ?")?
        .execute([id])?
        > 0;
    tx.prepare_cached("DELETE FROM history WHERE id = ?")?
        .execute([id])?;
    Ok(found)
}
