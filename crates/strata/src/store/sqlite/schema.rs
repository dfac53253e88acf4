//! The schema: the memory columns (one list for `memories` and
//! `archive`), the migrations, and the check that a file is strata's.
//! docs/schema.md is the contract these implement.

use super::*;

pub(super) const COLS: &str = "id, scope, kind, role, content, payload, key, tags, importance, source, session, \
     created_at, updated_at, last_accessed_at, access_count, expires_at, pinned, sensitive, tokens, \
     checksum, version, embedding_model, embedding, provenance";

pub(super) fn col_defs() -> &'static str {
    "id TEXT NOT NULL UNIQUE,
     scope TEXT NOT NULL,
     kind TEXT NOT NULL,
     role TEXT,
     content TEXT NOT NULL,
     payload TEXT,
     key TEXT,
     tags TEXT NOT NULL DEFAULT '[]',
     importance REAL NOT NULL,
     source TEXT NOT NULL,
     session TEXT,
     created_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL,
     last_accessed_at INTEGER,
     access_count INTEGER NOT NULL DEFAULT 0,
     expires_at INTEGER,
     pinned INTEGER NOT NULL DEFAULT 0,
     sensitive INTEGER NOT NULL DEFAULT 0,
     tokens INTEGER NOT NULL,
     checksum TEXT NOT NULL,
     version INTEGER NOT NULL,
     embedding_model TEXT,
     embedding BLOB,
     provenance TEXT"
}

pub(super) fn migration_1() -> String {
    format!(
        "CREATE TABLE memories (rowid INTEGER PRIMARY KEY, {cols});
         CREATE INDEX memories_scope ON memories(scope, created_at);
         CREATE INDEX memories_session ON memories(session) WHERE session IS NOT NULL;
         CREATE UNIQUE INDEX memories_scope_key ON memories(scope, key) WHERE key IS NOT NULL;
         CREATE VIRTUAL TABLE memories_fts USING fts5(content, scopes, content='',
             tokenize='porter unicode61 remove_diacritics 2');
         INSERT INTO memories_fts(memories_fts, rank) VALUES('secure-delete', 1);
         CREATE TABLE archive (rowid INTEGER PRIMARY KEY, {cols}, archived_at INTEGER NOT NULL, reason TEXT NOT NULL);
         CREATE INDEX archive_scope ON archive(scope, created_at);
         CREATE TABLE history (id TEXT NOT NULL, version INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (id, version)) WITHOUT ROWID;
         CREATE TABLE sessions (id TEXT PRIMARY KEY, scope TEXT NOT NULL, created_at INTEGER NOT NULL,
             last_activity_at INTEGER NOT NULL, archived_at INTEGER, max_bytes INTEGER NOT NULL, bytes INTEGER NOT NULL DEFAULT 0);",
        cols = col_defs()
    )
}

/// Version 2: the context log; scope indexes that cover the full
/// (created_at, id) order, so a newest-first read of a scope whose memories
/// share a timestamp (one batch) stops at its limit instead of sorting them
/// all; and active-memory counts per scope (kept where rows enter and leave
/// the text index, `fts_insert` and `fts_delete`), so text search gets a
/// view's size without counting its rows. (Triggers kept the counts too,
/// but made batched inserts 3.5× slower.)
pub(super) fn migration_2() -> String {
    "CREATE TABLE context_log (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, doc TEXT NOT NULL) WITHOUT ROWID;
     DROP INDEX memories_scope;
     CREATE INDEX memories_scope ON memories(scope, created_at, id);
     DROP INDEX archive_scope;
     CREATE INDEX archive_scope ON archive(scope, created_at, id);
     CREATE TABLE scope_counts (scope TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
     INSERT INTO scope_counts (scope, n) SELECT scope, COUNT(*) FROM memories GROUP BY scope;"
        .into()
}

/// Version 3: vectors. They stay in `memories.embedding` (little-endian
/// f32, normalised) beside `embedding_model`; an index on the model finds
/// the memories still waiting for a vector, `vector_models` fixes each
/// model's dimension so vectors of different lengths never mix, and
/// `vector_seq` / `version` / `epoch` / `index_version` keep the HNSW side
/// file in step (see `ann.rs`).
pub(super) fn migration_3() -> String {
    "ALTER TABLE memories ADD COLUMN vector_seq INTEGER;
     CREATE INDEX memories_embedding_model ON memories(embedding_model, vector_seq);
     CREATE TABLE vector_models (model TEXT PRIMARY KEY, dim INTEGER NOT NULL,
         version INTEGER NOT NULL DEFAULT 0, epoch INTEGER NOT NULL DEFAULT 0,
         index_version INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
     INSERT OR IGNORE INTO vector_models (model, dim, version)
         SELECT embedding_model, length(embedding) / 4, 1 FROM memories
         WHERE embedding_model IS NOT NULL GROUP BY embedding_model;
     UPDATE memories SET vector_seq = 1 WHERE embedding_model IS NOT NULL;"
        .into()
}

/// Version 4: leases (`Store::take_lease`), so processes sharing the file
/// never run upkeep or one project's eviction twice at once.
pub(super) fn migration_4() -> String {
    "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until INTEGER NOT NULL) WITHOUT ROWID;"
        .into()
}

/// Version 5: the audit trail (`crate::audit`). `audit` holds the entries
/// (`at` in microseconds, `scopes` and `ids` as JSON arrays); the one row
/// of `audit_chain` holds the chain's anchor (where the oldest kept entry
/// must start, moved by retention) and head (the newest entry), updated in
/// the write transaction of every append.
pub(super) fn migration_5() -> String {
    format!(
        "CREATE TABLE audit (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, actor TEXT NOT NULL,
             op TEXT NOT NULL, scopes TEXT NOT NULL, count INTEGER NOT NULL, ids TEXT NOT NULL,
             ids_omitted INTEGER NOT NULL, outcome TEXT NOT NULL, prev_hash TEXT NOT NULL,
             hash TEXT NOT NULL);
         CREATE INDEX audit_at ON audit(at);
         CREATE TABLE audit_chain (id INTEGER PRIMARY KEY CHECK (id = 1),
             anchor_seq INTEGER NOT NULL, anchor_hash TEXT NOT NULL,
             head_seq INTEGER NOT NULL, head_hash TEXT NOT NULL);
         INSERT INTO audit_chain VALUES (1, 1, '{g}', 0, '{g}');",
        g = crate::audit::GENESIS
    )
}

/// Version 6: learned memories by scope (a partial index: detectors' output
/// only), so text search leaves a view's learned memories out of BM25's
/// statistics (`search::Postings::learned`) without reading the view.
pub(super) fn migration_6() -> String {
    "CREATE INDEX memories_learned ON memories(scope) WHERE source = 'learned';".into()
}

/// Version 7: `text_index_state`, one row: `stale` is 1 while the text
/// index may hold entries of memories that left `memories` without FTS5's
/// `secure-delete` (demotion, whose memories' text lives on in the cold
/// tier; `SqliteStore::archive`). The next scrub (`forget`'s VACUUM)
/// first merges the index into one segment (`optimize`), which drops them,
/// and sets it back to 0.
pub(super) fn migration_7() -> String {
    "CREATE TABLE text_index_state (id INTEGER PRIMARY KEY CHECK (id = 1), stale INTEGER NOT NULL);
     INSERT INTO text_index_state (id, stale) VALUES (1, 0);"
        .into()
}

/// Version 8: the text index merges its segments off the write path
/// (`checkpoint.rs`), not inside the commits that write them. FTS5's
/// `automerge` merged 64 leaf pages per level into the commit of every
/// 64th leaf written: on a 100,000-memory store one remember in ~80 held
/// the write path 10-15 ms, and a crisis merge now and then 50-100 ms,
/// while every write queued behind it waited. `crisismerge` (16 segments
/// on a level) stays as SQLite's backstop.
pub(super) fn migration_8() -> String {
    "INSERT INTO memories_fts(memories_fts, rank) VALUES('automerge', 0);".into()
}

/// Version 9: the text index gains `scoped`, each distinct stem of a
/// memory's content joined to its exact scope, so a recall reads the
/// postings of its view's scopes instead of walking each term's postings
/// in the whole store (`fts.rs`). It keeps no positions (`detail=column`:
/// recall matches terms, never phrases) and no lengths (`columnsize=0`:
/// BM25 reads `memories.tokens`). Stale entries (`text_index_state`) go
/// with the old index. Version 10 replaces this index, and fills it from
/// the rows ([`reindex_text`]); version 9 alone is never left in a file
/// this build writes.
pub(super) fn migration_9() -> String {
    "DROP TABLE memories_fts;
     CREATE VIRTUAL TABLE memories_fts USING fts5(content, scopes, scoped, content='',
         detail=column, columnsize=0, tokenize='porter unicode61 remove_diacritics 2');
     INSERT INTO memories_fts(memories_fts, rank) VALUES('secure-delete', 1);
     INSERT INTO memories_fts(memories_fts, rank) VALUES('automerge', 0);
     UPDATE text_index_state SET stale = 0;"
        .into()
}

/// Version 10: the text index holds only `scopes` and `scoped`. Version
/// 9's `content` (the stemmed content, for views of many scopes) doubled
/// every posting a write made and every merge; such a view now reads a
/// stem's scoped tokens in every scope with one prefix query
/// (`scoped : ("stem_" *)`). Scopes are numbered in `scope_ids` (never
/// renumbered, never taken back) and a scoped token is `stem_<number>`:
/// version 9's 20-digit scope hashes were most of a token's bytes. The
/// tokens are stemmed in Rust already, so the tokenizer only folds
/// (`unicode61`, `_` kept inside a token). FTS5 cannot drop a column: the
/// index is made anew and [`reindex_text`] fills it from the rows.
pub(super) fn migration_10() -> String {
    "CREATE TABLE scope_ids (id INTEGER PRIMARY KEY, scope TEXT NOT NULL UNIQUE);
     DROP TABLE memories_fts;
     CREATE VIRTUAL TABLE memories_fts USING fts5(scopes, scoped, content='',
         detail=column, columnsize=0, tokenize=\"unicode61 remove_diacritics 2 tokenchars '_'\");
     INSERT INTO memories_fts(memories_fts, rank) VALUES('secure-delete', 1);
     INSERT INTO memories_fts(memories_fts, rank) VALUES('automerge', 0);
     UPDATE text_index_state SET stale = 0;"
        .into()
}

/// Indexes every row of `memories` in a new, empty `memories_fts`
/// (migration 10), then merges the index into one segment. A row whose
/// scope cannot be read is a corrupt row: the migration stops, and its
/// transaction leaves the file as it was.
pub(super) fn reindex_text(tx: &Connection) -> Result<()> {
    let mut rows = tx.prepare("SELECT rowid, content, scope FROM memories")?;
    let mut it = rows.query([])?;
    while let Some(r) = it.next()? {
        let scope: String = r.get(2)?;
        let scope = Scope::parse(&scope).map_err(|e| conv_err(2, e))?;
        fts_add(tx, r.get(0)?, &r.get::<_, String>(1)?, &scope)?;
    }
    tx.execute_batch("INSERT INTO memories_fts(memories_fts) VALUES('optimize');")?;
    Ok(())
}

/// Refuses a file that is another application's SQLite database, before
/// anything (the switch to WAL, strata's tables) changes it. A new or empty
/// file, or one holding strata's `schema_version`, is strata's.
pub(super) fn refuse_foreign(path: &Path, key: Option<&super::cipher::StoreKey>) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => {}
        _ => return Ok(()),
    }
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    super::cipher::apply(&c, path, key)?;
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if tables.is_empty() || tables.iter().any(|t| t == "schema_version") {
        return Ok(());
    }
    let mut shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
    if tables.len() > shown.len() {
        shown.push("…");
    }
    Err(Error::ForeignDatabase {
        path: path.display().to_string(),
        tables: shown.join(", "),
    })
}
