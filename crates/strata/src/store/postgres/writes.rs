//! Writes inside a transaction: a row with its postings and vector stamp
//! together; history; archive moves; deletes everywhere; session byte
//! accounting.

use super::*;

/// A transaction with the connection's statement cache.
pub(super) type Tx<'a, 'b> = Cx<'a, postgres::Transaction<'b>>;

/// Adds `delta` bytes to a session inside `tx`, enforcing its bound on growth.
pub(super) fn session_delta(
    tx: &mut Tx<'_, '_>,
    session: Option<&str>,
    delta: i64,
    at: Option<Timestamp>,
) -> Result<()> {
    let Some(id) = session else { return Ok(()) };
    let row = tx.query_opt(
        "SELECT bytes, max_bytes, archived_at FROM sessions WHERE id = $1 FOR UPDATE",
        &[&id],
    )?;
    let row = row.ok_or_else(|| Error::SessionNotFound(id.into()))?;
    let (bytes, max, archived): (i64, i64, Option<i64>) = (row.get(0), row.get(1), row.get(2));
    crate::store::check_session_delta(id, bytes as u64, max as u64, archived.is_some(), delta)?;
    let at = at.map(|t| t.as_millisecond());
    tx.execute(
        "UPDATE sessions SET bytes = GREATEST(0, bytes + $1::int8),
             last_activity_at = GREATEST(last_activity_at, COALESCE($2::int8, last_activity_at))
         WHERE id = $3",
        &[&delta, &at, &id],
    )?;
    Ok(())
}

/// The distinct terms a memory's content is indexed under: strata's own
/// words and stems (`text::stems`), the terms FTS5 indexes in SQLite.
pub(super) fn index_terms(content: &str) -> Vec<String> {
    let mut t: Vec<String> = crate::text::stems(content).into_iter().collect();
    t.sort_unstable();
    t
}

/// Indexes the row `seq` (now holding `m`): its postings, and a vector
/// stamp when it carries a vector.
pub(super) fn index_insert(tx: &mut Tx<'_, '_>, seq: i64, m: &Memory) -> Result<()> {
    let terms = index_terms(&m.content);
    if !terms.is_empty() {
        tx.execute(
            "INSERT INTO postings (term, scope, seq) SELECT t, $2, $3 FROM unnest($1::text[]) AS t",
            &[&terms, &m.scope.as_str(), &seq],
        )?;
    }
    stamp_vector(tx, seq, m)
}

/// A row that enters `memories` with a vector (restore, import, a key
/// superseded) gets the model's next version, so copies of the vectors
/// loaded elsewhere pick it up.
pub(super) fn stamp_vector(tx: &mut Tx<'_, '_>, seq: i64, m: &Memory) -> Result<()> {
    let Some(e) = &m.embedding else {
        return Ok(());
    };
    let dim = e.vector.len() as i64;
    tx.execute(
        "INSERT INTO vector_models (model, dim) VALUES ($1, $2) ON CONFLICT (model) DO NOTHING",
        &[&e.model, &dim],
    )?;
    let r = tx.query_one(
        "UPDATE vector_models SET version = version + 1 WHERE model = $1 RETURNING version, dim",
        &[&e.model],
    )?;
    let (v, dim): (i64, i64) = (r.get(0), r.get(1));
    search::check_vector(&m.id, e, dim as usize)?;
    tx.execute(
        "UPDATE memories SET vector_seq = $1 WHERE seq = $2",
        &[&v, &seq],
    )?;
    Ok(())
}

/// Removes a row's postings; `old` must be the memory exactly as it was
/// indexed (its terms and scope locate them in the primary key, as FTS5's
/// `'delete'` takes the indexed values in SQLite).
pub(super) fn index_delete(tx: &mut Tx<'_, '_>, seq: i64, old: &Memory) -> Result<()> {
    let terms = index_terms(&old.content);
    if !terms.is_empty() {
        tx.execute(
            "DELETE FROM postings WHERE term = ANY($1::text[]) AND scope = $2 AND seq = $3",
            &[&terms, &old.scope.as_str(), &seq],
        )?;
    }
    Ok(())
}

pub(super) fn get_active<C: postgres::GenericClient>(
    c: &mut Cx<'_, C>,
    id: &str,
) -> Result<Option<(i64, Memory)>> {
    let sql = format!("SELECT {COLS}, seq FROM memories WHERE id = $1");
    match c.query_opt(&sql, &[&id])? {
        Some(r) => Ok(Some((r.get(24), read_memory(&r)?))),
        None => Ok(None),
    }
}

pub(super) fn push_history(tx: &mut Tx<'_, '_>, old: &Memory) -> Result<()> {
    let doc = serde_json::to_string(old).map_err(|e| Error::field("history", e))?;
    tx.execute(
        "INSERT INTO history (id, version, doc) VALUES ($1, $2, $3)
         ON CONFLICT (id, version) DO UPDATE SET doc = EXCLUDED.doc",
        &[&old.id, &(old.version as i64), &doc],
    )?;
    Ok(())
}

/// Inserts a memory row; returns its `seq`, or PostgreSQL's error (the
/// caller tells a unique violation from a failure).
pub(super) fn insert_row(
    tx: &mut Tx<'_, '_>,
    m: &Memory,
) -> Result<std::result::Result<i64, postgres::Error>> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "INSERT INTO memories ({COLS}) VALUES ({}) RETURNING seq",
            placeholders(1)
        )
    });
    let p = memory_params(m);
    Ok(tx.query_one_raw(&SQL, &refs(&p))?.map(|r| r.get(0)))
}

/// The constraint a unique violation names, if `e` is one.
pub(super) fn unique_violation(e: &postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    (*db.code() == postgres::error::SqlState::UNIQUE_VIOLATION)
        .then(|| db.constraint().unwrap_or_default().to_string())
}

/// Stores one memory inside `tx`. `check_archive` may be false only when
/// the archive is known to be empty in this transaction.
pub(super) fn put_in(tx: &mut Tx<'_, '_>, m: Memory, check_archive: bool) -> Result<Put> {
    if let Some(key) = &m.key {
        let existing = tx.query_opt(
            "SELECT id FROM memories WHERE scope = $1 AND key = $2",
            &[&m.scope.as_str(), key],
        )?;
        if let Some(r) = existing {
            let old_id: String = r.get(0);
            let (seq, old) =
                get_active(tx, &old_id)?.ok_or_else(|| Error::NotFound(old_id.clone()))?;
            let new = crate::store::superseding(&old, m);
            for (session, delta, at) in crate::store::session_deltas(&old, &new) {
                session_delta(tx, session, delta, at)?;
            }
            push_history(tx, &old)?;
            replace_row(tx, seq, &old, &new)?;
            return Ok(Put::Superseded(new));
        }
    }
    let archived = check_archive
        && tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM archive WHERE id = $1)",
                &[&m.id],
            )?
            .get::<_, bool>(0);
    if archived {
        return Err(Error::DuplicateId(m.id.clone()));
    }
    session_delta(
        tx,
        m.session.as_deref(),
        m.size_bytes() as i64,
        Some(m.updated_at),
    )?;
    let seq = match insert_row(tx, &m)? {
        Ok(seq) => seq,
        Err(e) => {
            return Err(match unique_violation(&e).as_deref() {
                Some("memories_id_key") => Error::DuplicateId(m.id.clone()),
                Some("memories_scope_key") => Error::KeyConflict {
                    scope: m.scope.to_string(),
                    key: m.key.clone().unwrap_or_default(),
                },
                _ => e.into(),
            });
        }
    };
    index_insert(tx, seq, &m)?;
    Ok(Put::Inserted(m))
}

/// Replaces the row `seq` (holding `old`) by `m`, its postings and vector
/// stamp with it.
pub(super) fn replace_row(tx: &mut Tx<'_, '_>, seq: i64, old: &Memory, m: &Memory) -> Result<()> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let sets = COLS
            .split(", ")
            .enumerate()
            .map(|(i, c)| format!("{c} = ${}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        format!("UPDATE memories SET {sets}, vector_seq = NULL, embed_claim = NULL WHERE seq = $25")
    });
    let mut p = memory_params(m);
    p.push(Box::new(seq));
    tx.execute_p(&SQL, &p)?;
    index_delete(tx, seq, old)?;
    index_insert(tx, seq, m)
}

pub(super) fn archive_in(
    tx: &mut Tx<'_, '_>,
    id: &str,
    reason: &str,
    at: Timestamp,
) -> Result<bool> {
    let Some((seq, m)) = get_active(tx, id)? else {
        return Ok(false);
    };
    session_delta(tx, m.session.as_deref(), -(m.size_bytes() as i64), None)?;
    tx.execute(
        &format!(
            "INSERT INTO archive ({COLS}, archived_at, reason) SELECT {COLS}, $1, $2 FROM memories WHERE seq = $3"
        ),
        &[&at.as_millisecond(), &reason, &seq],
    )?;
    tx.execute("DELETE FROM memories WHERE seq = $1", &[&seq])?;
    index_delete(tx, seq, &m)?;
    Ok(true)
}

/// Deletes one memory everywhere: row, postings, archive, history.
pub(super) fn delete_in(tx: &mut Tx<'_, '_>, id: &str) -> Result<bool> {
    let mut found = false;
    if let Some((seq, m)) = get_active(tx, id)? {
        if let Some(s) = &m.session {
            tx.execute(
                "UPDATE sessions SET bytes = GREATEST(0, bytes - $1::int8) WHERE id = $2",
                &[&(m.size_bytes() as i64), s],
            )?;
        }
        tx.execute("DELETE FROM memories WHERE seq = $1", &[&seq])?;
        index_delete(tx, seq, &m)?;
        found = true;
    }
    found |= tx.execute("DELETE FROM archive WHERE id = $1", &[&id])? > 0;
    tx.execute("DELETE FROM history WHERE id = $1", &[&id])?;
    Ok(found)
}

/// Stores memories without a key, a session or a vector (a batch's common
/// case) with one statement for the rows and one for their postings,
/// appending a `Put::Inserted` for each to `out` in order. Fails with
/// `DuplicateId` (naming the first) when an id is taken or repeated.
pub(super) fn insert_plain(
    tx: &mut Tx<'_, '_>,
    ms: &mut Vec<Memory>,
    check_archive: bool,
    out: &mut Vec<Put>,
) -> Result<()> {
    if ms.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = ms.iter().map(|m| m.id.as_str()).collect();
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    if let Some(dup) = ids.iter().find(|id| !seen.insert(**id)) {
        return Err(Error::DuplicateId(dup.to_string()));
    }
    let taken_sql = if check_archive {
        "SELECT id FROM memories WHERE id = ANY($1::text[]) UNION ALL SELECT id FROM archive WHERE id = ANY($1::text[])"
    } else {
        "SELECT id FROM memories WHERE id = ANY($1::text[])"
    };
    let taken: std::collections::HashSet<String> = tx
        .query(taken_sql, &[&ids])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if let Some(id) = ids.iter().find(|id| taken.contains(**id)) {
        return Err(Error::DuplicateId(id.to_string()));
    }
    // COPY takes no RETURNING: the rows' keys are drawn first, in order.
    let seqs: Vec<i64> = tx
        .query(
            "SELECT nextval(pg_get_serial_sequence('memories', 'seq')) FROM generate_series(1, $1::int8)",
            &[&(ms.len() as i64)],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    // A COPY writes an identity column's given values (as OVERRIDING
    // SYSTEM VALUE does).
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("COPY memories (seq, {COLS}) FROM STDIN (FORMAT binary)")
    });
    let rows = ms.iter().zip(&seqs).map(|(m, seq)| {
        let mut p: Vec<P> = Vec::with_capacity(25);
        p.push(Box::new(*seq));
        p.extend(memory_params(m));
        p
    });
    tx.copy_in(&SQL, &memory_types(), rows)?;
    // In the primary key's order: each entry then lands beside the last
    // one in the index, on a page the insert before it touched.
    let mut postings: Vec<(String, &str, i64)> = ms
        .iter()
        .zip(&seqs)
        .flat_map(|(m, seq)| {
            index_terms(&m.content)
                .into_iter()
                .map(move |t| (t, m.scope.as_str(), *seq))
        })
        .collect();
    postings.sort_unstable();
    let postings = postings.into_iter().map(|(t, scope, seq)| -> Vec<P> {
        vec![Box::new(t), Box::new(scope.to_string()), Box::new(seq)]
    });
    use postgres::types::Type;
    tx.copy_in(
        "COPY postings (term, scope, seq) FROM STDIN (FORMAT binary)",
        &[Type::TEXT, Type::TEXT, Type::INT8],
        postings,
    )?;
    out.extend(ms.drain(..).map(Put::Inserted));
    Ok(())
}
