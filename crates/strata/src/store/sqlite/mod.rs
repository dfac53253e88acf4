//! The embedded store: one SQLite file (rusqlite, bundled SQLite with FTS5).
//!
//! Schema (version 1; `docs/schema.md` records every version):
//! - `memories`: one row per active memory; `rowid` links it to the index.
//! - `memories_fts`: contentless FTS5 (`content=''`, `secure-delete` on) over
//!   `scopes`, the scope terms of `fts::scope_terms`, and `scoped`, each
//!   distinct stem of the content joined to its scope's number in
//!   `scope_ids` (`fts::scoped_terms`; version 10). The text is stored
//!   once, in `memories`. A delete hands FTS5 the row's old values
//!   (the `'delete'` command), so FTS5 re-tokenizes them and, with
//!   `secure-delete`, removes every term entry from the index pages
//!   (archiving and moves to the cold tier, whose text lives on, delete
//!   with it off and mark the index stale, `text_index_state`; a forget's
//!   scrub merges the index first, dropping what they left). (A
//!   `contentless_delete=1` table would only tombstone the rowid and leave the
//!   forgotten terms in its segments until a merge.) The invariant this needs:
//!   the indexed values are exactly the terms of the row's `content` and
//!   `scope`, which every write keeps by updating both in one transaction.
//! - `archive`: the same columns plus `archived_at` and `reason`.
//! - `history`: superseded versions, one JSON document each.
//! - `sessions`, and `schema_version`.
//! - `audit` and `audit_chain`: the audit trail and its anchor and head
//!   (version 5, `audit.rs`).
//!
//! Every write is all or nothing inside one `BEGIN IMMEDIATE` transaction
//! (row, index, session bytes together), so several processes can share
//! the file: SQLite's `busy_timeout` queues the writers and WAL lets
//! readers go on. Concurrent writers of one process share transactions
//! (`group.rs`: each write under its own savepoint, one commit for the
//! group, every writer answered after that commit).
//! `secure_delete` overwrites freed pages, so forgotten text leaves the file
//! at the next checkpoint.
//!
//! This file holds the store, its options, opening and the capabilities
//! that are a statement or two each (rows, sessions, the context log); the
//! rest by concern: `schema.rs` (columns, migrations, the foreign-file
//! check), `pool.rs` (connections), `group.rs` (group commit), `rows.rs` (row ↔ memory), `sql.rs`
//! (view, filter, order and limit as SQL), `filter_sql.rs` (filters as
//! JSON1), `writes.rs` (what a transaction does to a row, its index entries
//! and counts), `fts.rs` (FTS5 expressions, scope terms, the postings BM25
//! ranks with), `vectors.rs` and `ann.rs` (vectors, exact and HNSW
//! search). No SQL or SQLite type leaves this folder.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use rusqlite::types::Value as SqlValue;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params, params_from_iter,
};

use super::search;
use super::{
    Access, Archived, ContextLog, IdPlan, ImportCounts, ImportItem, ImportRules, Order,
    PendingVector, Put, Query, Rows, ScopeCount, Session, Sessions, Store, StoreStats, TextSearch,
    VectorCounts, VectorSearch,
};
use crate::Result;
use crate::error::Error;
use crate::model::{Embedding, Kind, Memory, Provenance};
use crate::rank::Signals;
use crate::scope::{Scope, View};
pub use cipher::{Conversion, StoreKey, convert_with};

#[cfg(feature = "ann")]
mod ann;
mod audit;
mod checkpoint;
pub(crate) mod cipher;
mod copies;
mod filter_sql;
mod fts;
mod group;
mod pool;
mod rows;
mod schema;
mod sql;
mod text_queue;
mod vectors;
mod writes;

use pool::*;
use rows::*;
use schema::*;
use sql::*;
use writes::*;

/// SQLite's errors as the engine's: a value a row cannot be read back as
/// (a scope, a time, JSON) is [`Error::Corrupt`], anything else a storage
/// error that carries SQLite's own as its source.
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        match e {
            rusqlite::Error::FromSqlConversionFailure(col, _, source) => Error::Corrupt {
                what: format!("column {col} of a stored row"),
                source,
            },
            rusqlite::Error::IntegralValueOutOfRange(col, v) => Error::Corrupt {
                what: format!("column {col} of a stored row"),
                source: format!("{v} is out of range").into(),
            },
            // SQLITE_FULL: a write found no room (ENOSPC, or the file at
            // `max_page_count`); the transaction is rolled back.
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error {
                    code: rusqlite::ErrorCode::DiskFull,
                    ..
                },
                _,
            ) => Error::DiskFull {
                backend: "sqlite",
                source: Box::new(e),
            },
            e => Error::Storage {
                backend: "sqlite",
                source: Box::new(e),
            },
        }
    }
}

/// Newest schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 10;

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// `synchronous=FULL`: a commit survives power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: a commit survives a process crash; the last
    /// commits may be lost on power loss.
    Normal,
}

/// Options of a SQLite store.
#[derive(Clone, Debug, PartialEq)]
pub struct SqliteOptions {
    /// Commit durability.
    pub durability: Durability,
    /// How long a writer waits for the write lock.
    pub busy_timeout: Duration,
    /// Page cache per connection, in KiB.
    pub cache_kib: u32,
    /// Bytes of the file read through a memory map (`PRAGMA mmap_size`;
    /// 0 reads with `read()` only). A map spares each connection copying
    /// pages into its own cache again after another connection wrote.
    pub mmap_bytes: u64,
    /// Rewrite the file (`VACUUM`) after a delete, so no trace of forgotten
    /// text survives in the unused space of reused pages.
    pub vacuum_on_delete: bool,
    /// Views holding at least this many memories search vectors through
    /// the HNSW index (feature `ann`) instead of scanning them.
    pub ann_min_view: usize,
    /// Bytes of vectors this process keeps in memory for exact search:
    /// the views searched, each loaded when it fits after dropping views
    /// no search used for 30 s (least recently used first); a view that
    /// does not fit is read through SQL on each search. 0 turns the copy
    /// off.
    pub vector_cache_bytes: usize,
    /// The key of an encrypted file (feature `encryption`); `None`: plain.
    pub key: Option<StoreKey>,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(30),
            cache_kib: 32 * 1024,
            mmap_bytes: 1 << 30,
            vacuum_on_delete: true,
            ann_min_view: 20_000,
            vector_cache_bytes: 64 << 20,
            key: None,
        }
    }
}

/// The embedded SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    opts: SqliteOptions,
    pool: Arc<Pool>,
    /// Every write goes through it (group commit).
    writer: Arc<group::Writer>,
    /// Checkpoints, and merges the text index, off the write path
    /// (`checkpoint.rs`).
    checkpointer: checkpoint::Checkpointer,
    /// This process's copy of recently searched views' vectors.
    copies: copies::Copies,
    #[cfg(feature = "ann")]
    ann: std::sync::Arc<ann::Indexes>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("opts", &self.opts)
            .finish()
    }
}

impl SqliteStore {
    /// Deletes memories everywhere in one transaction; with `vacuum`
    /// (and `vacuum_on_delete`) the file is rewritten after.
    /// Deletes `ids` everywhere (`Rows::delete`), then scrubs the file.
    fn delete_scrubbed(&self, ids: &[String]) -> Result<usize> {
        let mut vectors: Vec<(String, i64)> = Vec::new();
        let n = self.write(|tx| {
            let mut n = 0;
            for i in in_row_order(tx, ids.iter().map(String::as_str))? {
                vectors.extend(vector_of(tx, &ids[i])?);
                n += delete_in(tx, &ids[i])? as usize;
            }
            vectors_gone(tx, &vectors)?;
            Ok(n)
        })?;
        self.copies.forget(&vectors);
        #[cfg(feature = "ann")]
        self.forget_in_index(&vectors)?;
        if n > 0 && self.opts.vacuum_on_delete {
            // secure_delete zeroes the cells and pages SQLite frees, and
            // FTS5's secure-delete removes the terms from the index; but a
            // page reused after an FTS5 segment merge can still carry old
            // index bytes in its unused area (seen in `forget` tests after a
            // superseded key and a few hundred writes). Rewriting the file
            // is the one way to leave no trace.
            // Best effort: the delete itself is committed; a VACUUM that
            // cannot run now (disk full, a long writer) is not a failed forget.
            let _ = self.drop_stale_index_entries();
            let _ = self.conn().map(|c| c.execute_batch("VACUUM"));
        }
        Ok(n)
    }

    /// When demotions left index entries of memories behind
    /// (`text_index_state.stale`), merges the text index into one segment,
    /// which drops them, in the transaction that clears the mark. Before a
    /// VACUUM, so the pages they were on leave the file.
    fn drop_stale_index_entries(&self) -> Result<()> {
        self.write(|tx| {
            let stale: i64 =
                tx.query_row("SELECT stale FROM text_index_state", [], |r| r.get(0))?;
            if stale != 0 {
                // Archives earlier in this group leave entries too.
                text_queue::write_now(tx)?;
                tx.execute_batch(
                    "INSERT INTO memories_fts(memories_fts) VALUES('optimize');
                     UPDATE text_index_state SET stale = 0;",
                )?;
            }
            Ok(())
        })
    }

    /// Opens (creating if needed) the database at `path` and brings its
    /// schema up to date.
    pub fn open(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        cipher::check_file(&path, opts.key.as_ref())?;
        refuse_foreign(&path, opts.key.as_ref())?;
        let busy_timeout = opts.busy_timeout;
        let store = SqliteStore {
            path,
            opts,
            pool: Default::default(),
            writer: Arc::new(group::Writer::new(busy_timeout)),
            checkpointer: Default::default(),
            copies: Default::default(),
            #[cfg(feature = "ann")]
            ann: Default::default(),
        };
        let mut c = store.conn()?;
        store.migrate(&mut c)?;
        drop(c);
        Ok(store)
    }

    /// Merges the text index's segments until no level holds enough of
    /// them to merge, a step ([`checkpoint::MERGE_PAGES`] pages) a
    /// transaction.
    fn merge_text_index(&self) -> Result<()> {
        while self.write(checkpoint::merge_step)? {}
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The full-text terms this store indexes a scope's memories under
    /// (`memories_fts.scope_terms`), for tools that write rows themselves,
    /// such as the benchmark's raw-insert ceiling.
    pub fn scope_terms(scope: &Scope) -> String {
        fts::scope_terms(scope)
    }

    /// The terms this store indexes a memory of `content` under in
    /// `memories_fts.scoped`, in the scope `scope_ids` numbers `scope_id`
    /// (each distinct stem joined to that number), for tools that write
    /// rows themselves.
    pub fn scoped_terms(content: &str, scope_id: i64) -> String {
        fts::scoped_terms(content, scope_id)
    }

    fn conn(&self) -> Result<Conn<'_>> {
        Ok(Conn {
            store: self,
            conn: Some(self.take_conn()?),
        })
    }

    /// An idle connection from the pool, or a new one.
    fn take_conn(&self) -> Result<Connection> {
        take_from(&self.pool, &self.path, &self.opts)
    }

    /// Returns a connection to the pool (one left inside a transaction is
    /// closed instead).
    fn give_back(&self, c: Connection) {
        give_back_to(&self.pool, c);
    }

    fn migrate(&self, c: &mut Connection) -> Result<()> {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at INTEGER NOT NULL)")?;
        let current: i64 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version",
            [],
            |r| r.get(0),
        )?;
        if current > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        let migrations: [fn() -> String; 10] = [
            migration_1,
            migration_2,
            migration_3,
            migration_4,
            migration_5,
            migration_6,
            migration_7,
            migration_8,
            migration_9,
            migration_10,
        ];
        for (i, m) in migrations.iter().enumerate() {
            let v = i as i64 + 1;
            if v > current {
                tx.execute_batch(&m())?;
                if v == 10 {
                    // The new text index is filled from the rows, which
                    // takes the stemmer: no SQL does it.
                    reindex_text(&tx)?;
                }
                tx.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                    params![v, Timestamp::now().as_millisecond()],
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Runs `f` in this process's write transaction (`group.rs`): it
    /// returns once the transaction holding `f`'s work has committed.
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let out = self
            .writer
            .write(|| self.take_conn(), &|c| self.give_back(c), f);
        if out.is_ok() {
            self.checkpointer
                .wrote(&self.path, &self.opts, || checkpoint::WritePath {
                    writer: self.writer.clone(),
                    pool: self.pool.clone(),
                });
        }
        out
    }

    /// Brings the file to rest: merges the text index's segments as far as
    /// FTS5 would (what the store's thread otherwise does in the gaps
    /// between writes, `checkpoint.rs`), then writes the WAL back into the
    /// database file and truncates it. A checkpoint another connection is
    /// running (the store's own checkpointer thread, another process's) is
    /// waited out, up to five seconds; fails if the checkpoint still could
    /// not finish (a reader kept an old snapshot that long).
    pub fn checkpoint(&self) -> Result<()> {
        self.merge_text_index()?;
        let c = self.conn()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let r = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            });
            let (done, log) = match r {
                Ok((0, _, _)) => return Ok(()),
                Ok((_, log, done)) => (done, log),
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if matches!(
                        e.code,
                        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                    ) =>
                {
                    (-1, -1)
                }
                Err(e) => return Err(e.into()),
            };
            if std::time::Instant::now() >= deadline {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                    Some(format!(
                        "checkpoint incomplete: {done} of {log} frames written back"
                    )),
                )
                .into());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Runs `PRAGMA integrity_check` and returns its report (`ok` when sound).
    pub fn integrity_check(&self) -> Result<String> {
        let c = self.conn()?;
        let mut st = c.prepare("PRAGMA integrity_check")?;
        let rows: Vec<String> = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows.join("\n"))
    }
}

/// The vector model and row of an active memory that has a vector.
fn vector_of(tx: &Connection, id: &str) -> Result<Option<(String, i64)>> {
    Ok(tx
        .prepare_cached(
            "SELECT embedding_model, rowid FROM memories WHERE id = ? AND embedding_model IS NOT NULL",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// Marks copies of the vector index loaded elsewhere out of date, after
/// `vectors` were deleted.
fn vectors_gone(tx: &Connection, vectors: &[(String, i64)]) -> Result<()> {
    let mut bump =
        tx.prepare_cached("UPDATE vector_models SET epoch = epoch + 1 WHERE model = ?")?;
    for (model, _) in vectors {
        bump.execute([model])?;
    }
    Ok(())
}

impl Rows for SqliteStore {
    fn put(&self, m: &Memory) -> Result<Put> {
        self.write(|tx| put_in(tx, m.clone(), true))
    }

    fn put_batch(&self, ms: &mut dyn Iterator<Item = Result<Memory>>) -> Result<Vec<Put>> {
        self.write(|tx| {
            let archive_empty: bool =
                tx.query_row("SELECT NOT EXISTS (SELECT 1 FROM archive)", [], |r| {
                    r.get(0)
                })?;
            ms.map(|m| put_in(tx, m?, !archive_empty)).collect()
        })
    }

    fn import(&self, items: &[ImportItem], rules: &ImportRules) -> Result<ImportCounts> {
        let fenced = !rules.fence.is_everything();
        self.write(|tx| {
            let mut n = ImportCounts::default();
            for it in items {
                let held: Option<String> = tx
                    .prepare_cached("SELECT scope FROM memories WHERE id = ?1 UNION ALL SELECT scope FROM archive WHERE id = ?1 LIMIT 1")?
                    .query_row([&it.memory.id], |r| r.get(0))
                    .optional()?;
                let held = held.map(|s| Scope::parse(&s)).transpose()?;
                let rekeyed;
                let it = match super::plan_import_id(it, held.as_ref(), rules.on_conflict, &rules.fence)? {
                    IdPlan::New => it,
                    IdPlan::Skip => {
                        n.skipped += 1;
                        continue;
                    }
                    IdPlan::Replace => {
                        delete_in(tx, &it.memory.id)?;
                        n.replaced += 1;
                        it
                    }
                    IdPlan::Rekey => {
                        rekeyed = super::rekeyed(it);
                        &rekeyed
                    }
                };
                let m = &it.memory;
                let held_session = match &m.session {
                    Some(s) => tx
                        .prepare_cached("SELECT id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes FROM sessions WHERE id = ?")?
                        .query_row([s], read_session)
                        .optional()?,
                    None => None,
                };
                if let Some(sess) = super::import_session(it, held_session.as_ref(), rules)? {
                    tx.prepare_cached(
                        "INSERT INTO sessions (id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes) VALUES (?, ?, ?, ?, NULL, ?, 0)",
                    )?
                    .execute(params![sess.id, sess.scope.as_str(), sess.created_at.as_millisecond(), sess.last_activity_at.as_millisecond(), sess.max_bytes as i64])?;
                }
                match &it.archived {
                    Some((at, reason)) => {
                        let mut p = memory_params(m);
                        p.push(SqlValue::Integer(at.as_millisecond()));
                        p.push(SqlValue::Text(reason.clone()));
                        tx.prepare_cached(&format!("INSERT INTO archive ({COLS}, archived_at, reason) VALUES ({PLACEHOLDERS}, ?, ?)"))?
                            .execute(params_from_iter(p))?;
                        n.archived += 1;
                    }
                    None => {
                        if fenced {
                            // A caller limited to scopes writes like any
                            // writer: the session's bound holds.
                            session_delta(tx, m.session.as_deref(), m.size_bytes() as i64, Some(m.updated_at))?;
                        }
                        let r = insert_row(tx, m);
                        match r {
                            Ok(_) => {}
                            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
                                return Err(Error::KeyConflict { scope: m.scope.to_string(), key: m.key.clone().unwrap_or_default() });
                            }
                            Err(e) => return Err(e.into()),
                        }
                        let rowid = tx.last_insert_rowid();
                        fts_insert(tx, rowid, m)?;
                        if let (Some(s), false) = (&m.session, fenced) {
                            tx.prepare_cached("UPDATE sessions SET bytes = bytes + ?, last_activity_at = MAX(last_activity_at, ?) WHERE id = ?")?
                                .execute(params![m.size_bytes() as i64, m.updated_at.as_millisecond(), s])?;
                        }
                    }
                }
                n.imported += 1;
                for h in &it.history {
                    push_history(tx, h)?;
                    n.history += 1;
                }
            }
            Ok(n)
        })
    }

    fn get(&self, id: &str) -> Result<Option<Memory>> {
        let c = self.conn()?;
        Ok(get_active(&c, id)?.map(|(_, m)| m))
    }

    fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<(String, Scope)>> {
        let c = self.conn()?;
        // `id` is UNIQUE in both tables: each half is a range of its index.
        // The upper bound sorts after every string that starts with `prefix`.
        let end = format!("{prefix}\u{10FFFF}");
        let mut st = c.prepare_cached(
            "SELECT id, scope FROM (
                 SELECT id, scope FROM memories WHERE id >= ?1 AND id < ?2
                 UNION ALL
                 SELECT id, scope FROM archive WHERE id >= ?1 AND id < ?2)
             ORDER BY id LIMIT ?3",
        )?;
        let rows: Vec<(String, String)> = st
            .query_map(
                params![prefix, end, limit.min(i64::MAX as usize) as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        rows.into_iter()
            .map(|(id, scope)| {
                let scope = Scope::parse(&scope).map_err(|e| Error::Corrupt {
                    what: format!("the scope of {id}"),
                    source: Box::new(e),
                })?;
                Ok((id, scope))
            })
            .collect()
    }

    fn update(&self, m: &Memory, expected_version: u64) -> Result<Memory> {
        self.write(|tx| {
            let (rowid, old) = get_active(tx, &m.id)?.ok_or_else(|| Error::NotFound(m.id.clone()))?;
            if old.version != expected_version {
                return Err(Error::VersionConflict { id: m.id.clone(), expected: expected_version, current: old.version });
            }
            if let Some(k) = &m.key {
                let taken: bool = tx
                    .prepare_cached("SELECT EXISTS (SELECT 1 FROM memories WHERE scope = ? AND key = ? AND id != ?)")?
                    .query_row(params![m.scope.as_str(), k, m.id], |r| r.get(0))?;
                if taken {
                    return Err(Error::KeyConflict { scope: m.scope.to_string(), key: k.clone() });
                }
            }
            let mut new = m.clone();
            new.version = expected_version + 1;
            new.created_at = old.created_at;
            new.session = old.session.clone();
            let delta = new.size_bytes() as i64 - old.size_bytes() as i64;
            session_delta(tx, old.session.as_deref(), delta, Some(new.updated_at))?;
            push_history(tx, &old)?;
            replace_row(tx, rowid, &old, &new)?;
            Ok(new)
        })
    }

    fn delete(&self, ids: &[String]) -> Result<usize> {
        self.delete_scrubbed(ids)
    }

    fn delete_moved(&self, moved: &[(String, u64)]) -> Result<Vec<String>> {
        let mut vectors: Vec<(String, i64)> = Vec::new();
        let out = self.write(|tx| {
            text_queue::insecure(tx, || {
                let mut deleted = vec![false; moved.len()];
                let mut per_scope: std::collections::HashMap<String, i64> = Default::default();
                for i in in_row_order(tx, moved.iter().map(|(id, _)| id.as_str()))? {
                    let (id, version) = &moved[i];
                    // Changed since it was read, or gone: it stays.
                    if let Some(m) = delete_moved_in(tx, id, *version, &mut per_scope)? {
                        vectors.extend(m.vector);
                        deleted[i] = true;
                    }
                }
                let out = moved
                    .iter()
                    .zip(deleted)
                    .filter(|(_, d)| *d)
                    .map(|((id, _), _)| id.clone())
                    .collect::<Vec<_>>();
                for (scope, n) in &per_scope {
                    count_scope(tx, &Scope::parse(scope)?, -n)?;
                }
                vectors_gone(tx, &vectors)?;
                if !per_scope.is_empty() {
                    tx.execute_batch("UPDATE text_index_state SET stale = 1")?;
                }
                Ok(out)
            })
        })?;
        self.copies.forget(&vectors);
        #[cfg(feature = "ann")]
        self.forget_in_index(&vectors)?;
        Ok(out)
    }

    fn scrub(&self) -> Result<()> {
        if self.opts.vacuum_on_delete {
            self.drop_stale_index_entries()?;
            self.conn()?.execute_batch("VACUUM")?;
        }
        Ok(())
    }

    fn query(&self, q: &Query) -> Result<Vec<Memory>> {
        let c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        let lim = limit_sql(q, &mut p);
        let sql = format!(
            "SELECT {COLS} FROM memories m WHERE {w} {} {lim}",
            order_sql(q.order)
        );
        let mut st = c.prepare_cached(&sql)?;
        let rows = st
            .query_map(params_from_iter(p), read_memory)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn query_signals(&self, q: &Query) -> Result<Vec<Signals>> {
        let c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        // Without a limit the caller ranks every row itself: skip the sort.
        let tail = if q.limit.is_none() && q.offset == 0 {
            String::new()
        } else {
            let lim = limit_sql(q, &mut p);
            format!("{} {lim}", order_sql(q.order))
        };
        let sql = format!("SELECT {SIGNAL_COLS} FROM memories m WHERE {w} {tail}");
        let mut st = c.prepare_cached(&sql)?;
        let rows = st
            .query_map(params_from_iter(p), read_signals)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn get_many(&self, ids: &[String]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.conn()?;
        // One statement, in the order asked (the CROSS JOIN walks the list).
        let list = serde_json::to_string(ids).map_err(|e| Error::field("ids", e))?;
        let mut st = c.prepare_cached(&format!(
            "SELECT {} FROM json_each(?) AS j CROSS JOIN memories m ON m.id = j.value ORDER BY j.key",
            COLS.split(", ").map(|col| format!("m.{col}")).collect::<Vec<_>>().join(", ")
        ))?;
        let rows = st
            .query_map([list], read_memory)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn count(&self, q: &Query) -> Result<u64> {
        let c = self.conn()?;
        let mut p = Vec::new();
        // Every row of a view, expired or not (a project's bound, checked
        // on every write): the per-scope counts the writes keep
        // (`count_scope`) answer in one row a scope, where counting the
        // rows took time in proportion to the project.
        let sql = if q.include_expired && q.filter.is_trivial() {
            let v = view_sql(q.view.as_ref(), "m.", &mut p);
            format!("SELECT COALESCE(SUM(m.n), 0) FROM scope_counts m WHERE {v}")
        } else {
            let w = where_sql(q, false, &mut p);
            format!("SELECT COUNT(*) FROM memories m WHERE {w}")
        };
        let n: i64 = c
            .prepare_cached(&sql)?
            .query_row(params_from_iter(p), |r| r.get(0))?;
        Ok(n as u64)
    }

    fn count_by_kind(&self, q: &Query) -> Result<std::collections::BTreeMap<String, u64>> {
        let c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        let mut st = c.prepare_cached(&format!(
            "SELECT m.kind, COUNT(*) FROM memories m WHERE {w} GROUP BY m.kind"
        ))?;
        let rows = st
            .query_map(params_from_iter(p), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    fn list_scopes(&self) -> Result<Vec<ScopeCount>> {
        let c = self.conn()?;
        let mut st = c.prepare_cached(
            "SELECT scope, SUM(a), SUM(b) FROM (
                 SELECT scope, COUNT(*) AS a, 0 AS b FROM memories GROUP BY scope
                 UNION ALL SELECT scope, 0, COUNT(*) FROM archive GROUP BY scope)
             GROUP BY scope ORDER BY scope",
        )?;
        let rows = st
            .query_map([], |r| {
                let s: String = r.get(0)?;
                Ok(ScopeCount {
                    scope: Scope::parse(&s).map_err(|e| conv_err(0, e))?,
                    memories: r.get::<_, i64>(1)? as u64,
                    archived: r.get::<_, i64>(2)? as u64,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn stats(&self) -> Result<StoreStats> {
        let c = self.conn()?;
        let one =
            |sql: &str| -> Result<u64> { Ok(c.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64) };
        let mut s = StoreStats {
            backend: "sqlite".into(),
            ..StoreStats::default()
        };
        s.memories = one("SELECT COUNT(*) FROM memories")?;
        s.archived = one("SELECT COUNT(*) FROM archive")?;
        s.history = one("SELECT COUNT(*) FROM history")?;
        s.sessions = one("SELECT COUNT(*) FROM sessions")?;
        s.scopes = one("SELECT COUNT(DISTINCT scope) FROM memories")?;
        s.tokens = one("SELECT COALESCE(SUM(tokens), 0) FROM memories")?;
        let mut st = c.prepare("SELECT scope, kind FROM memories")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let scope: String = r.get(0)?;
            let kind: String = r.get(1)?;
            let tier = Scope::parse(&scope)
                .map(|s| s.tier().as_str())
                .unwrap_or("project");
            *s.by_tier.entry(tier.into()).or_default() += 1;
            *s.by_kind.entry(kind).or_default() += 1;
        }
        let pages = one("PRAGMA page_count")?;
        // SQLCipher answers `page_size` on an encrypted file as text (its
        // `cipher_page_size`).
        let size = match c.query_row("PRAGMA page_size", [], |r| r.get::<_, SqlValue>(0))? {
            SqlValue::Integer(n) => n as u64,
            SqlValue::Text(t) => t.trim().parse().unwrap_or(0),
            _ => 0,
        };
        s.file_bytes = pages * size;
        s.schema_version =
            c.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))?;
        Ok(s)
    }

    fn touch(&self, accesses: &[Access]) -> Result<()> {
        if accesses.is_empty() {
            return Ok(());
        }
        self.write(|tx| {
            let mut st = tx.prepare_cached(
                "UPDATE memories SET access_count = access_count + ?1,
                     last_accessed_at = MAX(COALESCE(last_accessed_at, ?2), ?2)
                 WHERE id = ?3",
            )?;
            for a in accesses {
                st.execute(params![a.count as i64, a.at.as_millisecond(), a.id])?;
            }
            Ok(())
        })
    }

    fn archive(&self, ids: &[String], reason: &str, at: Timestamp) -> Result<usize> {
        // An archived memory's text lives on, in the archive table.
        self.write(|tx| {
            text_queue::insecure(tx, || {
                let n = archive_in(tx, ids, reason, at)?;
                if n > 0 {
                    tx.execute_batch("UPDATE text_index_state SET stale = 1")?;
                }
                Ok(n)
            })
        })
    }

    fn query_archived(&self, q: &Query) -> Result<Vec<Archived>> {
        let c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, true, &mut p);
        let lim = limit_sql(q, &mut p);
        let sql = format!(
            "SELECT {COLS}, archived_at, reason FROM archive m WHERE {w} {} {lim}",
            order_sql(q.order)
        );
        let mut st = c.prepare_cached(&sql)?;
        let rows = st
            .query_map(params_from_iter(p), |r| {
                Ok(Archived {
                    memory: read_memory(r)?,
                    archived_at: ts(r, 24)?,
                    reason: r.get(25)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn restore(&self, ids: &[String]) -> Result<usize> {
        self.write(|tx| {
            let mut n = 0;
            for id in ids {
                let row: Option<(i64, Memory)> = tx
                    .prepare_cached(&format!("SELECT {COLS}, rowid FROM archive WHERE id = ?"))?
                    .query_row([id], |r| Ok((r.get(24)?, read_memory(r)?)))
                    .optional()?;
                let Some((arow, m)) = row else { continue };
                if let Some(k) = &m.key {
                    let taken: bool = tx
                        .prepare_cached(
                            "SELECT EXISTS (SELECT 1 FROM memories WHERE scope = ? AND key = ?)",
                        )?
                        .query_row(params![m.scope.as_str(), k], |r| r.get(0))?;
                    if taken {
                        return Err(Error::KeyConflict {
                            scope: m.scope.to_string(),
                            key: k.clone(),
                        });
                    }
                }
                tx.prepare_cached(&format!(
                    "INSERT INTO memories ({COLS}) SELECT {COLS} FROM archive WHERE rowid = ?"
                ))?
                .execute([arow])?;
                let rowid = tx.last_insert_rowid();
                tx.prepare_cached("DELETE FROM archive WHERE rowid = ?")?
                    .execute([arow])?;
                fts_insert(tx, rowid, &m)?;
                session_delta(tx, m.session.as_deref(), m.size_bytes() as i64, None)?;
                n += 1;
            }
            Ok(n)
        })
    }

    fn history(&self, id: &str) -> Result<Vec<Memory>> {
        let c = self.conn()?;
        let mut st = c.prepare_cached("SELECT doc FROM history WHERE id = ? ORDER BY version")?;
        let docs: Vec<String> = st
            .query_map([id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        docs.iter()
            .map(|d| serde_json::from_str(d).map_err(|e| Error::field("history", e)))
            .collect()
    }

    fn put_history(&self, m: &Memory) -> Result<()> {
        self.write(|tx| push_history(tx, m))
    }
}

impl Sessions for SqliteStore {
    fn create_session(&self, s: &Session) -> Result<()> {
        self.write(|tx| {
            let n = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO sessions (id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                )?
                .execute(params![
                    s.id,
                    s.scope.as_str(),
                    s.created_at.as_millisecond(),
                    s.last_activity_at.as_millisecond(),
                    s.archived_at.map(|t| t.as_millisecond()),
                    s.max_bytes as i64,
                    s.bytes as i64
                ])?;
            if n == 0 {
                return Err(Error::DuplicateSession(s.id.clone()));
            }
            Ok(())
        })
    }

    fn remove_empty_session(&self, id: &str) -> Result<bool> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM sessions WHERE id = ?1 AND bytes = 0 AND archived_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM memories WHERE session = ?1)
                   AND NOT EXISTS (SELECT 1 FROM archive WHERE session = ?1)",
                [id],
            )?;
            Ok(n > 0)
        })
    }

    fn get_session(&self, id: &str) -> Result<Option<Session>> {
        let c = self.conn()?;
        Ok(c.prepare_cached("SELECT id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes FROM sessions WHERE id = ?")?
            .query_row([id], read_session)
            .optional()?)
    }

    fn list_sessions(&self) -> Result<Vec<Session>> {
        let c = self.conn()?;
        let mut st = c.prepare_cached(
            "SELECT id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes FROM sessions ORDER BY created_at, id",
        )?;
        let rows = st
            .query_map([], read_session)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn archive_session(&self, id: &str, at: Timestamp) -> Result<Session> {
        self.write(|tx| {
            let exists: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                [id],
                |r| r.get(0),
            )?;
            if !exists {
                return Err(Error::SessionNotFound(id.into()));
            }
            let ids: Vec<String> = tx
                .prepare_cached("SELECT id FROM memories WHERE session = ?")?
                .query_map([id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if !ids.is_empty() {
                // Their text lives on, in the archive table.
                text_queue::insecure(tx, || {
                    archive_in(tx, &ids, "session_archived", at)?;
                    tx.execute_batch("UPDATE text_index_state SET stale = 1")?;
                    Ok(())
                })?;
            }
            tx.execute(
                "UPDATE sessions SET archived_at = COALESCE(archived_at, ?) WHERE id = ?",
                params![at.as_millisecond(), id],
            )?;
            Ok(())
        })?;
        self.get_session(id)?
            .ok_or_else(|| Error::SessionNotFound(id.into()))
    }
}

impl ContextLog for SqliteStore {
    fn log_context(&self, id: &str, at: Timestamp, doc: &str) -> Result<()> {
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO context_log (id, created_at, doc) VALUES (?, ?, ?)",
            )?
            .execute(params![id, at.as_millisecond(), doc])?;
            Ok(())
        })
    }

    fn context_log(&self, id: &str) -> Result<Option<String>> {
        let c = self.conn()?;
        Ok(
            c.prepare_cached("SELECT doc FROM context_log WHERE id = ?")?
                .query_row([id], |r| r.get(0))
                .optional()?,
        )
    }

    fn context_logs(&self) -> Result<Vec<(String, Timestamp, String)>> {
        let c = self.conn()?;
        let mut st = c.prepare("SELECT id, created_at, doc FROM context_log ORDER BY id")?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, ts(r, 1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl Store for SqliteStore {
    fn writes_can_hurry(&self) -> bool {
        true
    }

    fn reads_never_wait(&self, with_vectors: bool) -> bool {
        // WAL: a reader never waits for a writer, and the pool opens a
        // connection rather than wait for one. The HNSW index, though, is
        // one per process behind a lock held while it loads, catches up
        // with new vectors (up to 5,000) or is saved: seconds, at times.
        !(with_vectors && cfg!(feature = "ann") && self.opts.ann_min_view < usize::MAX)
    }

    fn take_lease(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool> {
        self.write(|tx| {
            let n = tx
                .prepare_cached(
                    "INSERT INTO leases (name, holder, until) VALUES (?1, ?2, ?3)
                     ON CONFLICT (name) DO UPDATE SET holder = ?2, until = ?3
                     WHERE leases.holder = ?2 OR leases.until <= ?4",
                )?
                .execute(params![
                    name,
                    holder,
                    until.as_millisecond(),
                    now.as_millisecond()
                ])?;
            Ok(n == 1)
        })
    }

    fn end_lease(&self, name: &str, holder: &str) -> Result<()> {
        self.write(|tx| {
            tx.prepare_cached("DELETE FROM leases WHERE name = ? AND holder = ?")?
                .execute(params![name, holder])?;
            Ok(())
        })
    }
}

/// The store's idle connections.
type Pool = Mutex<Vec<Connection>>;

/// An idle connection from `pool`, or a new one to the file at `path`.
fn take_from(pool: &Pool, path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let pooled = pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
    match pooled {
        Some(c) => Ok(c),
        None => open_conn(path, opts),
    }
}

/// Returns a connection to `pool` (one left inside a transaction is
/// closed instead).
fn give_back_to(pool: &Pool, c: Connection) {
    if c.is_autocommit() {
        let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < pool::POOL_MAX_IDLE {
            pool.push(c);
        }
    }
}

/// A new connection to the file at `path`, with the store's settings.
fn open_conn(path: &Path, opts: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    // Reading through a memory map, connections share one map of the
    // file (`strata-vfs`): SQLite's own map is a connection's, dropped
    // and faulted in again after every commit of another connection.
    // An encrypted file is read through SQLCipher's pager, never a map.
    let shared_map = (opts.mmap_bytes > 0 && opts.key.is_none())
        .then(strata_vfs::register)
        .flatten();
    let c = match shared_map {
        Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs)?,
        None => Connection::open_with_flags(path, flags)?,
    };
    cipher::apply(&c, path, opts.key.as_ref())?;
    c.busy_timeout(opts.busy_timeout)?;
    // journal_mode is persistent in the file; setting it on every
    // connection is a no-op after the first.
    // Switching a new file to WAL needs an exclusive lock and SQLite
    // does not wait for it: when several processes create the file at
    // once, retry within the busy timeout.
    let started = std::time::Instant::now();
    let mode: String = loop {
        match c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < opts.busy_timeout =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            r => break r?,
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Storage {
            backend: "sqlite",
            source: format!(
                "could not switch {} to write-ahead logging (journal mode is {mode})",
                path.display()
            )
            .into(),
        });
    }
    c.execute_batch(&format!(
        "{}; PRAGMA secure_delete=ON; PRAGMA cache_size=-{}; PRAGMA temp_store=MEMORY;
         PRAGMA mmap_size={}; PRAGMA wal_autocheckpoint={};",
        sync_pragma(opts.durability),
        opts.cache_kib,
        opts.mmap_bytes,
        checkpoint::BACKSTOP_PAGES
    ))?;
    // Plans must not depend on bound values: otherwise SQLite (built
    // with STAT4) re-prepares FTS5's own term lookup on every new
    // binding, about a sixth of a recall's time.
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    c.set_prepared_statement_cache_capacity(64);
    Ok(c)
}
