//! The embedded store: one SQLite file (rusqlite, bundled SQLite with FTS5).
//!
//! Schema (version 1; `docs/schema.md` records every version):
//! - `memories`: one row per active memory; `rowid` links it to the index.
//! - `memories_fts`: contentless FTS5 (`content=''`, `secure-delete` on) over
//!   `content` and `scopes`, the scope terms of `fts::scope_terms`. The text
//!   is stored once, in `memories`. A delete hands FTS5 the row's old values
//!   (the `'delete'` command), so FTS5 re-tokenizes them and, with
//!   `secure-delete`, removes every term entry from the index pages. (A
//!   `contentless_delete=1` table would only tombstone the rowid and leave the
//!   forgotten terms in its segments until a merge.) The invariant this needs:
//!   the indexed values are exactly the row's `content` and the terms of its
//!   `scope`, which every write keeps by updating both in one transaction.
//! - `archive`: the same columns plus `archived_at` and `reason`.
//! - `history`: superseded versions, one JSON document each.
//! - `sessions`, and `schema_version`.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction (row, index, session
//! bytes together), so several processes can share the file: SQLite's
//! `busy_timeout` queues the writers and WAL lets readers go on.
//! `secure_delete` overwrites freed pages, so forgotten text leaves the file
//! at the next checkpoint.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use rusqlite::types::Value as SqlValue;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior, params,
    params_from_iter,
};

use super::search;
use super::{
    Access, Archived, ContextLog, IdPlan, ImportCounts, ImportItem, ImportRules, Order,
    PendingVector, Put, Query, Rows, ScopeCount, Session, Sessions, Store, StoreStats, TextSearch,
    VectorSearch,
};
use crate::Result;
use crate::error::Error;
use crate::model::{Embedding, Kind, Memory, Provenance};
use crate::rank::Signals;
use crate::scope::{Scope, View};

#[cfg(feature = "ann")]
mod ann;
mod filter_sql;
mod fts;

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
            e => Error::Storage {
                backend: "sqlite",
                source: Box::new(e),
            },
        }
    }
}

pub use fts::scope_terms;

/// Newest schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 3;

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
        }
    }
}

/// The embedded SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    opts: SqliteOptions,
    pool: Mutex<Vec<Connection>>,
    /// See [`SqliteStore::write_turn`].
    writer: Mutex<()>,
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

const COLS: &str = "id, scope, kind, role, content, payload, key, tags, importance, source, session, \
     created_at, updated_at, last_accessed_at, access_count, expires_at, pinned, sensitive, tokens, \
     checksum, version, embedding_model, embedding, provenance";

fn col_defs() -> &'static str {
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

fn migration_1() -> String {
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
fn migration_2() -> String {
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
fn migration_3() -> String {
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

/// A pooled connection, returned to the pool on drop.
struct Conn<'a> {
    store: &'a SqliteStore,
    conn: Option<Connection>,
}

impl std::ops::Deref for Conn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().unwrap()
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().unwrap()
    }
}

impl Conn<'_> {
    /// Closes the connection instead of returning it to the pool.
    fn discard(&mut self) {
        self.conn.take();
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take()
            && c.is_autocommit()
        {
            let mut pool = self.store.pool.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < POOL_MAX_IDLE {
                pool.push(c);
            }
        }
    }
}

/// Idle connections a store keeps for reuse. Connections are opened when
/// that many are busy at once, so the pool grows to the peak concurrency
/// (a server's `max_concurrent`, a caller's threads) up to this bound;
/// one closed and opened again loses its prepared statements and cache.
const POOL_MAX_IDLE: usize = 64;

/// Refuses a file that is another application's SQLite database, before
/// anything (the switch to WAL, strata's tables) changes it. A new or empty
/// file, or one holding strata's `schema_version`, is strata's.
fn refuse_foreign(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => {}
        _ => return Ok(()),
    }
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
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

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its
    /// schema up to date.
    pub fn open(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        refuse_foreign(&path)?;
        let store = SqliteStore {
            path,
            opts,
            pool: Mutex::new(Vec::new()),
            writer: Mutex::new(()),
            #[cfg(feature = "ann")]
            ann: Default::default(),
        };
        let mut c = store.conn()?;
        store.migrate(&mut c)?;
        drop(c);
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(&self) -> Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let c = Connection::open_with_flags(&self.path, flags)?;
        c.busy_timeout(self.opts.busy_timeout)?;
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
                        && started.elapsed() < self.opts.busy_timeout =>
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
                    self.path.display()
                )
                .into(),
            });
        }
        c.execute_batch(&format!(
            "{}; PRAGMA secure_delete=ON; PRAGMA cache_size=-{}; PRAGMA temp_store=MEMORY;
             PRAGMA mmap_size={};",
            sync_pragma(self.opts.durability),
            self.opts.cache_kib,
            self.opts.mmap_bytes
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

    fn conn(&self) -> Result<Conn<'_>> {
        let pooled = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        Ok(Conn {
            store: self,
            conn: Some(conn),
        })
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
        let migrations: [fn() -> String; 3] = [migration_1, migration_2, migration_3];
        for (i, m) in migrations.iter().enumerate() {
            let v = i as i64 + 1;
            if v > current {
                tx.execute_batch(&m())?;
                tx.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                    params![v, Timestamp::now().as_millisecond()],
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// This process's turn to write. SQLite's own lock makes a writer that
    /// finds it taken sleep and retry (1, 2, 5 … 100 ms), so writers of one
    /// process queue here first and wake the moment the one before them
    /// commits; the busy timeout still settles contention between
    /// processes.
    fn write_turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut c = self.conn()?;
        let _turn = self.write_turn();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Writes the WAL back into the database file and truncates it. Fails
    /// if another connection kept the checkpoint from finishing.
    pub fn checkpoint(&self) -> Result<()> {
        let c = self.conn()?;
        let (busy, log, done): (i64, i64, i64) =
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        if busy != 0 {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some(format!(
                    "checkpoint incomplete: {done} of {log} frames written back"
                )),
            )
            .into());
        }
        Ok(())
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

fn sync_pragma(d: Durability) -> &'static str {
    match d {
        Durability::Full => "PRAGMA synchronous=FULL",
        Durability::Normal => "PRAGMA synchronous=NORMAL",
    }
}

/// Column `i` as a time. A value out of range is a corrupt row, never a
/// silent 1970.
fn ts(r: &Row<'_>, i: usize) -> rusqlite::Result<Timestamp> {
    let ms: i64 = r.get(i)?;
    Timestamp::from_millisecond(ms).map_err(|e| conv_err(i, e))
}

fn opt_ts_at(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Timestamp>> {
    match r.get::<_, Option<i64>>(i)? {
        None => Ok(None),
        Some(ms) => Timestamp::from_millisecond(ms)
            .map(Some)
            .map_err(|e| conv_err(i, e)),
    }
}

fn conv_err(i: usize, e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
}

/// The columns [`read_signals`] reads, in its order.
const SIGNAL_COLS: &str =
    "m.id, m.kind, m.importance, m.created_at, m.updated_at, m.access_count, m.tokens";

fn read_signals(r: &Row<'_>) -> rusqlite::Result<Signals> {
    Ok(Signals {
        id: r.get(0)?,
        kind: r.get(1)?,
        importance: r.get(2)?,
        created_at: ts(r, 3)?,
        updated_at: ts(r, 4)?,
        access_count: r.get::<_, i64>(5)? as u64,
        tokens: r.get::<_, i64>(6)? as u32,
    })
}

fn read_memory(r: &Row<'_>) -> rusqlite::Result<Memory> {
    let scope: String = r.get(1)?;
    let kind: String = r.get(2)?;
    let role: Option<String> = r.get(3)?;
    let payload: Option<String> = r.get(5)?;
    let tags: String = r.get(7)?;
    let source: String = r.get(9)?;
    let emb_model: Option<String> = r.get(21)?;
    let emb: Option<Vec<u8>> = r.get(22)?;
    let prov: Option<String> = r.get(23)?;
    Ok(Memory {
        id: r.get(0)?,
        scope: Scope::parse(&scope).map_err(|e| conv_err(1, e))?,
        kind: kind.parse::<Kind>().map_err(|e| conv_err(2, e))?,
        role: role
            .map(|s| s.parse())
            .transpose()
            .map_err(|e| conv_err(3, e))?,
        content: r.get(4)?,
        payload: payload
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(|e| conv_err(5, e))?,
        key: r.get(6)?,
        tags: serde_json::from_str(&tags).map_err(|e| conv_err(7, e))?,
        importance: r.get(8)?,
        source: source.parse().map_err(|e| conv_err(9, e))?,
        session: r.get(10)?,
        created_at: ts(r, 11)?,
        updated_at: ts(r, 12)?,
        last_accessed_at: opt_ts_at(r, 13)?,
        access_count: r.get::<_, i64>(14)? as u64,
        expires_at: opt_ts_at(r, 15)?,
        pinned: r.get(16)?,
        sensitive: r.get(17)?,
        tokens: r.get::<_, i64>(18)? as u32,
        checksum: r.get(19)?,
        version: r.get::<_, i64>(20)? as u64,
        embedding: match (emb_model, emb) {
            (Some(model), Some(bytes)) => Some(Embedding {
                model,
                vector: bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            }),
            _ => None,
        },
        provenance: prov
            .map(|p| serde_json::from_str::<Provenance>(&p))
            .transpose()
            .map_err(|e| conv_err(23, e))?,
    })
}

fn memory_params(m: &Memory) -> Vec<SqlValue> {
    let opt_text = |s: Option<String>| s.map_or(SqlValue::Null, SqlValue::Text);
    let opt_ts =
        |t: Option<Timestamp>| t.map_or(SqlValue::Null, |t| SqlValue::Integer(t.as_millisecond()));
    vec![
        SqlValue::Text(m.id.clone()),
        SqlValue::Text(m.scope.to_string()),
        SqlValue::Text(m.kind.to_string()),
        opt_text(m.role.map(|r| r.to_string())),
        SqlValue::Text(m.content.clone()),
        opt_text(m.payload.as_ref().map(|p| p.to_string())),
        opt_text(m.key.clone()),
        SqlValue::Text(serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into())),
        SqlValue::Real(m.importance),
        SqlValue::Text(m.source.to_string()),
        opt_text(m.session.clone()),
        SqlValue::Integer(m.created_at.as_millisecond()),
        SqlValue::Integer(m.updated_at.as_millisecond()),
        opt_ts(m.last_accessed_at),
        SqlValue::Integer(m.access_count as i64),
        opt_ts(m.expires_at),
        SqlValue::Integer(m.pinned as i64),
        SqlValue::Integer(m.sensitive as i64),
        SqlValue::Integer(m.tokens as i64),
        SqlValue::Text(m.checksum.clone()),
        SqlValue::Integer(m.version as i64),
        opt_text(m.embedding.as_ref().map(|e| e.model.clone())),
        m.embedding.as_ref().map_or(SqlValue::Null, |e| {
            SqlValue::Blob(e.vector.iter().flat_map(|x| x.to_le_bytes()).collect())
        }),
        opt_text(
            m.provenance
                .as_ref()
                .and_then(|p| serde_json::to_string(p).ok()),
        ),
    ]
}

const PLACEHOLDERS: &str = "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?";

/// SQL selecting the rows a view may see, with its parameters.
fn view_sql(view: Option<&View>, alias: &str, params: &mut Vec<SqlValue>) -> String {
    let Some(view) = view else { return "1".into() };
    if view.is_empty() {
        return "0".into();
    }
    let parts: Vec<String> = view
        .entries()
        .iter()
        .map(|e| {
            params.push(SqlValue::Text(e.scope.to_string()));
            if e.subtree {
                let (lo, hi) = e.range();
                params.push(SqlValue::Text(lo));
                params.push(SqlValue::Text(hi));
                format!("{alias}scope = ? OR ({alias}scope > ? AND {alias}scope < ?)")
            } else {
                format!("{alias}scope = ?")
            }
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// The WHERE clause of a query over `memories` or `archive` aliased `m.`.
fn where_sql(q: &Query, archived: bool, params: &mut Vec<SqlValue>) -> String {
    let mut clauses = vec![view_sql(q.view.as_ref(), "m.", params)];
    if !q.include_expired && !archived {
        params.push(SqlValue::Integer(q.now.as_millisecond()));
        clauses.push("(m.expires_at IS NULL OR m.expires_at > ?)".into());
    }
    if !q.filter.is_trivial() {
        clauses.push(filter_sql::filter_sql(&q.filter, "m.", params));
    }
    clauses.join(" AND ")
}

fn order_sql(o: Order) -> &'static str {
    match o {
        Order::Newest => "ORDER BY m.created_at DESC, m.id DESC",
        Order::Oldest => "ORDER BY m.created_at ASC, m.id ASC",
    }
}

fn limit_sql(q: &Query, params: &mut Vec<SqlValue>) -> String {
    params.push(SqlValue::Integer(
        q.limit.map_or(-1, |l| l.min(i64::MAX as usize) as i64),
    ));
    params.push(SqlValue::Integer(q.offset as i64));
    "LIMIT ? OFFSET ?".into()
}

/// Adds `delta` bytes to a session inside `tx`, enforcing its bound on growth.
fn session_delta(
    tx: &Transaction<'_>,
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
    if delta > 0 {
        if archived.is_some() {
            return Err(Error::SessionArchived(id.into()));
        }
        if bytes + delta > max {
            return Err(Error::SessionFull {
                session: id.into(),
                used: bytes as u64,
                adding: delta as u64,
                bound: max as u64,
            });
        }
    }
    let at = at.map(|t| t.as_millisecond());
    tx.prepare_cached(
        "UPDATE sessions SET bytes = MAX(0, bytes + ?), last_activity_at = MAX(last_activity_at, COALESCE(?, last_activity_at)) WHERE id = ?",
    )?
    .execute(params![delta, at, id])?;
    Ok(())
}

fn fts_insert(tx: &Transaction<'_>, rowid: i64, m: &Memory) -> Result<()> {
    // Batches write many memories to few scopes; their terms are cached.
    thread_local! {
        static TERMS: std::cell::RefCell<std::collections::HashMap<String, String>> = Default::default();
    }
    let mut st =
        tx.prepare_cached("INSERT INTO memories_fts(rowid, content, scopes) VALUES (?, ?, ?)")?;
    TERMS.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() > 256 {
            t.clear();
        }
        if !t.contains_key(m.scope.as_str()) {
            t.insert(m.scope.to_string(), fts::scope_terms(&m.scope));
        }
        st.execute(params![rowid, m.content, t[m.scope.as_str()].as_str()])
    })?;
    count_scope(tx, &m.scope, 1)?;
    stamp_vector(tx, rowid, m)
}

/// A row that enters `memories` with a vector (restore, import, a key
/// superseded by an import) gets the model's next version, so the vector
/// index picks it up.
fn stamp_vector(tx: &Transaction<'_>, rowid: i64, m: &Memory) -> Result<()> {
    let Some(e) = &m.embedding else {
        return Ok(());
    };
    tx.prepare_cached("INSERT OR IGNORE INTO vector_models (model, dim) VALUES (?, ?)")?
        .execute(params![e.model, e.vector.len() as i64])?;
    let dim: i64 = tx
        .prepare_cached("SELECT dim FROM vector_models WHERE model = ?")?
        .query_row([&e.model], |r| r.get(0))?;
    if dim as usize != e.vector.len() {
        return Err(Error::Embedding(format!(
            "memory `{}`: a vector of length {} from `{}`, whose vectors in this store have length {dim}",
            m.id,
            e.vector.len(),
            e.model
        )));
    }
    let v: i64 = tx
        .prepare_cached(
            "UPDATE vector_models SET version = version + 1 WHERE model = ? RETURNING version",
        )?
        .query_row([&e.model], |r| r.get(0))?;
    tx.prepare_cached("UPDATE memories SET vector_seq = ? WHERE rowid = ?")?
        .execute(params![v, rowid])?;
    Ok(())
}

/// Inserts a memory row, binding fields by reference.
fn insert_row(tx: &Transaction<'_>, m: &Memory) -> rusqlite::Result<usize> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("INSERT INTO memories ({COLS}) VALUES ({PLACEHOLDERS})")
    });
    let tags = serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into());
    let payload = m.payload.as_ref().map(|p| p.to_string());
    let emb: Option<Vec<u8>> = m
        .embedding
        .as_ref()
        .map(|e| e.vector.iter().flat_map(|x| x.to_le_bytes()).collect());
    let prov = m
        .provenance
        .as_ref()
        .and_then(|p| serde_json::to_string(p).ok());
    tx.prepare_cached(&SQL)?.execute(params![
        m.id,
        m.scope.as_str(),
        m.kind.as_str(),
        m.role.map(|r| r.as_str()),
        m.content,
        payload,
        m.key,
        tags,
        m.importance,
        m.source.as_str(),
        m.session,
        m.created_at.as_millisecond(),
        m.updated_at.as_millisecond(),
        m.last_accessed_at.map(|t| t.as_millisecond()),
        m.access_count as i64,
        m.expires_at.map(|t| t.as_millisecond()),
        m.pinned,
        m.sensitive,
        m.tokens as i64,
        m.checksum,
        m.version as i64,
        m.embedding.as_ref().map(|e| e.model.as_str()),
        emb,
        prov,
    ])
}

/// Removes a row's entries from the index; `old` must be the memory exactly
/// as it was indexed.
fn fts_delete(tx: &Transaction<'_>, rowid: i64, old: &Memory) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO memories_fts(memories_fts, rowid, content, scopes) VALUES ('delete', ?, ?, ?)",
    )?
    .execute(params![rowid, old.content, fts::scope_terms(&old.scope)])?;
    count_scope(tx, &old.scope, -1)
}

/// Keeps `scope_counts` (active memories per scope) in step with the rows
/// entering and leaving `memories`; a scope's row goes when it reaches 0.
fn count_scope(tx: &Transaction<'_>, scope: &Scope, delta: i64) -> Result<()> {
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

fn get_active(tx: &Connection, id: &str) -> Result<Option<(i64, Memory)>> {
    Ok(tx
        .prepare_cached(&format!("SELECT {COLS}, rowid FROM memories WHERE id = ?"))?
        .query_row([id], |r| Ok((r.get(24)?, read_memory(r)?)))
        .optional()?)
}

fn push_history(tx: &Transaction<'_>, old: &Memory) -> Result<()> {
    let doc = serde_json::to_string(old).map_err(|e| Error::field("history", e))?;
    tx.prepare_cached("INSERT OR REPLACE INTO history (id, version, doc) VALUES (?, ?, ?)")?
        .execute(params![old.id, old.version as i64, doc])?;
    Ok(())
}

/// Stores one memory inside `tx`. `check_archive` may be false only when the
/// archive is known to be empty in this transaction.
fn put_in(tx: &Transaction<'_>, m: Memory, check_archive: bool) -> Result<Put> {
    if let Some(key) = &m.key {
        let existing: Option<String> = tx
            .prepare_cached("SELECT id FROM memories WHERE scope = ? AND key = ?")?
            .query_row(params![m.scope.as_str(), key], |r| r.get(0))
            .optional()?;
        if let Some(old_id) = existing {
            let (rowid, old) =
                get_active(tx, &old_id)?.ok_or_else(|| Error::NotFound(old_id.clone()))?;
            let mut new = m;
            new.id = old.id.clone();
            new.created_at = old.created_at;
            new.version = old.version + 1;
            new.access_count = old.access_count;
            new.last_accessed_at = old.last_accessed_at;
            if old.session == new.session {
                let delta = new.size_bytes() as i64 - old.size_bytes() as i64;
                session_delta(tx, new.session.as_deref(), delta, Some(new.updated_at))?;
            } else {
                session_delta(
                    tx,
                    new.session.as_deref(),
                    new.size_bytes() as i64,
                    Some(new.updated_at),
                )?;
                session_delta(tx, old.session.as_deref(), -(old.size_bytes() as i64), None)?;
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

fn replace_row(tx: &Transaction<'_>, rowid: i64, old: &Memory, m: &Memory) -> Result<()> {
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

fn archive_in(tx: &Transaction<'_>, id: &str, reason: &str, at: Timestamp) -> Result<bool> {
    let Some((rowid, m)) = get_active(tx, id)? else {
        return Ok(false);
    };
    session_delta(tx, m.session.as_deref(), -(m.size_bytes() as i64), None)?;
    tx.prepare_cached(&format!(
        "INSERT INTO archive ({COLS}, archived_at, reason) SELECT {COLS}, ?, ? FROM memories WHERE rowid = ?"
    ))?
    .execute(params![at.as_millisecond(), reason, rowid])?;
    tx.prepare_cached("DELETE FROM memories WHERE rowid = ?")?
        .execute([rowid])?;
    fts_delete(tx, rowid, &m)?;
    Ok(true)
}

/// Deletes one memory everywhere: row, text index, archive, history.
fn delete_in(tx: &Transaction<'_>, id: &str) -> Result<bool> {
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

#[cfg(feature = "ann")]
impl SqliteStore {
    /// Active memories in the view (from `scope_counts`).
    fn view_size(&self, c: &Connection, q: &Query) -> Result<usize> {
        let mut p = Vec::new();
        let v = view_sql(q.view.as_ref(), "m.", &mut p);
        Ok(c.prepare_cached(&format!(
            "SELECT COALESCE(SUM(m.n), 0) FROM scope_counts m WHERE {v}"
        ))?
        .query_row(params_from_iter(p), |r| r.get::<_, i64>(0))? as usize)
    }

    /// Vector search through the HNSW index: over-fetch, then check each
    /// hit against its row (view, filter, expiry, model) and score it with
    /// the stored vector. `None` when the index cannot serve the query now
    /// (missing, or being built in the background): the caller scans.
    fn search_ann(
        &self,
        c: &mut Connection,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Option<Vec<(Signals, f32)>>> {
        let Some((version, epoch, _, dim)) = ann::counters(c, model)? else {
            return Ok(Some(Vec::new()));
        };
        if dim != query.len() {
            return Ok(Some(Vec::new()));
        }
        // The common case: this process's copy is current, and searches
        // share it.
        {
            let g = self.ann.loaded.read().unwrap_or_else(|p| p.into_inner());
            if let Some(a) = g.get(model)
                && a.epoch == epoch
                && a.version >= version
            {
                return self.search_copy(c, q, model, query, limit, a);
            }
        }
        let mut g = self.ann.loaded.write().unwrap_or_else(|p| p.into_inner());
        if g.get(model).is_none_or(|a| a.epoch != epoch) {
            g.remove(model);
            if ann::building(&self.ann, model) {
                return Ok(None);
            }
            match ann::Ann::load(c, &self.path, model)? {
                Some(a) if a.epoch == epoch => {
                    g.insert(model.to_string(), a);
                }
                _ => {
                    drop(g);
                    self.build_index(model);
                    return Ok(None);
                }
            }
        }
        let a = g.get_mut(model).expect("present");
        if !a.sync(c, model, version)? {
            g.remove(model);
            drop(g);
            self.build_index(model);
            return Ok(None);
        }
        if a.worth_saving() {
            // Best effort: a refused save means a forget happened; the next
            // search drops this copy.
            let _ = a.save(c, model);
        }
        self.search_copy(c, q, model, query, limit, a)
    }

    /// Searches a current copy of the index: over-fetches by how much of
    /// the index the view holds, checks and rescores each hit against its
    /// row, and widens the search until the view yields `limit` hits.
    fn search_copy(
        &self,
        c: &mut Connection,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
        a: &ann::Ann,
    ) -> Result<Option<Vec<(Signals, f32)>>> {
        let total = a.index.size();
        let view = self.view_size(c, q)?.max(1);
        let mut k = (limit * 2 * total.div_ceil(view)).max(64);
        for _ in 0..4 {
            let found = a.search(query, k)?;
            let hits = self.rescore(c, q, model, query, &found)?;
            if hits.len() >= limit || k >= total {
                let mut hits = hits;
                super::sort_similar(&mut hits);
                hits.truncate(limit);
                return Ok(Some(hits));
            }
            k *= 4;
        }
        Ok(None)
    }

    /// How many vectors this process's copy of `model`'s HNSW index holds
    /// (`None` when none is loaded).
    pub fn vector_index_size(&self, model: &str) -> Option<usize> {
        let g = self.ann.loaded.read().unwrap_or_else(|p| p.into_inner());
        g.get(model).map(|a| a.index.size())
    }

    /// Starts building `model`'s index from the store in the background.
    fn build_index(&self, model: &str) {
        let (path, opts) = (self.path.clone(), self.opts.clone());
        ann::build_in_background(&self.ann, &self.path, model, move || {
            let probe = SqliteStore {
                path,
                opts,
                pool: Mutex::new(Vec::new()),
                writer: Mutex::new(()),
                ann: Default::default(),
            };
            probe.connect()
        });
    }

    /// The rows of `found` that `q` selects, with their exact similarity.
    fn rescore(
        &self,
        c: &Connection,
        q: &Query,
        model: &str,
        query: &[f32],
        found: &[(i64, f32)],
    ) -> Result<Vec<(Signals, f32)>> {
        let ids: Vec<i64> = found.iter().map(|f| f.0).collect();
        let mut p = vec![SqlValue::Text(
            serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()),
        )];
        let w = where_sql(q, false, &mut p);
        p.push(SqlValue::Text(model.to_string()));
        let mut st = c.prepare_cached(&format!(
            "SELECT {SIGNAL_COLS}, m.embedding FROM json_each(?) AS j CROSS JOIN memories m
             ON m.rowid = j.value WHERE {w} AND m.embedding_model = ?"
        ))?;
        let rows = st.query_map(params_from_iter(p), |r| {
            let s = read_signals(r)?;
            let sim = match r.get_ref(7)? {
                rusqlite::types::ValueRef::Blob(b) if b.len() == query.len() * 4 => {
                    crate::embed::dot_bytes(query, b)
                }
                _ => f32::MIN,
            };
            Ok((s, sim))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (s, sim) = r?;
            if sim > f32::MIN {
                out.push((s, sim));
            }
        }
        Ok(out)
    }

    /// Deletes the index side files of the models whose vectors were just
    /// forgotten (the rows are gone; the next large search builds the index
    /// again, in the background), so no forgotten vector stays on disk.
    fn forget_in_index(&self, vectors: &[(String, i64)]) -> Result<()> {
        let mut g = self.ann.loaded.write().unwrap_or_else(|p| p.into_inner());
        for (model, _) in vectors {
            g.remove(model);
            let path = ann::side_file(&self.path, model);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
            }
        }
        Ok(())
    }
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
        let mut vectors: Vec<(String, i64)> = Vec::new();
        let n = self.write(|tx| {
            let mut n = 0;
            let mut st = tx.prepare_cached(
                "SELECT embedding_model, rowid FROM memories WHERE id = ? AND embedding_model IS NOT NULL",
            )?;
            for id in ids {
                if let Some(v) = st.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional()? {
                    vectors.push(v);
                }
                n += delete_in(tx, id)? as usize;
            }
            // Copies of a vector index loaded elsewhere are now out of date.
            let mut bump = tx.prepare_cached("UPDATE vector_models SET epoch = epoch + 1 WHERE model = ?")?;
            for (model, _) in &vectors {
                bump.execute([model])?;
            }
            Ok(n)
        })?;
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
            let _ = self.conn().map(|c| c.execute_batch("VACUUM"));
        }
        Ok(n)
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
        let w = where_sql(q, false, &mut p);
        let n: i64 = c
            .prepare_cached(&format!("SELECT COUNT(*) FROM memories m WHERE {w}"))?
            .query_row(params_from_iter(p), |r| r.get(0))?;
        Ok(n as u64)
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
        let size = one("PRAGMA page_size")?;
        s.file_bytes = pages * size;
        s.schema_version =
            c.query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))?;
        Ok(s)
    }

    fn touch(&self, accesses: &[Access]) -> Result<()> {
        if accesses.is_empty() {
            return Ok(());
        }
        // Access statistics steer ranking but are not acknowledged writes:
        // this commit skips the WAL fsync (`synchronous=NORMAL` still
        // survives a process crash; only power loss can drop the last few).
        let mut c = self.conn()?;
        c.execute_batch("PRAGMA synchronous=NORMAL")?;
        let r = (|| -> Result<()> {
            let _turn = self.write_turn();
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut st = tx.prepare_cached(
                    "UPDATE memories SET access_count = access_count + ?1,
                         last_accessed_at = MAX(COALESCE(last_accessed_at, ?2), ?2)
                     WHERE id = ?3",
                )?;
                for a in accesses {
                    st.execute(params![a.count as i64, a.at.as_millisecond(), a.id])?;
                }
            }
            tx.commit()?;
            Ok(())
        })();
        if c.execute_batch(sync_pragma(self.opts.durability)).is_err() {
            // Never pool a connection left at the weaker setting.
            c.discard();
        }
        r
    }

    fn archive(&self, ids: &[String], reason: &str, at: Timestamp) -> Result<usize> {
        self.write(|tx| {
            let mut n = 0;
            for id in ids {
                n += archive_in(tx, id, reason, at)? as usize;
            }
            Ok(n)
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
            for mid in ids {
                archive_in(tx, &mid, "session_archived", at)?;
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

impl TextSearch for SqliteStore {
    fn search_signals(
        &self,
        q: &Query,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(Signals, f64)>> {
        if q.view.as_ref().is_some_and(|v| v.is_empty()) {
            return Ok(Vec::new());
        }
        let c = self.conn()?;
        let scope_part = q
            .view
            .as_ref()
            .map(|v| format!("scopes : ({}) AND ", fts::view_expr(v)))
            .unwrap_or_default();
        search::text_search(
            &mut FtsPostings {
                c: &c,
                q,
                scope_part,
            },
            terms,
            limit,
        )
    }
}

impl VectorSearch for SqliteStore {
    fn pending_vectors(
        &self,
        model: &str,
        ids: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<PendingVector>> {
        let c = self.conn()?;
        let lim = limit.min(i64::MAX as usize) as i64;
        let cols = "m.rowid, m.id, m.checksum, m.content, m.scope, m.kind, m.session, m.created_at";
        let read = |r: &Row<'_>| -> rusqlite::Result<(
            i64,
            PendingVector,
            String,
            String,
            Option<String>,
            i64,
        )> {
            Ok((
                r.get(0)?,
                PendingVector {
                    id: r.get(1)?,
                    checksum: r.get(2)?,
                    content: r.get(3)?,
                    before: None,
                },
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        };
        let mut rows: Vec<_> = match ids {
            Some(ids) => c
                .prepare_cached(&format!(
                    "SELECT {cols} FROM json_each(?1) AS j CROSS JOIN memories m ON m.id = j.value
                     WHERE m.embedding_model IS NOT ?2 ORDER BY m.rowid LIMIT ?3"
                ))?
                .query_map(
                    params![
                        serde_json::to_string(ids).unwrap_or_else(|_| "[]".into()),
                        model,
                        lim
                    ],
                    read,
                )?
                .collect::<rusqlite::Result<_>>()?,
            None => c
                .prepare_cached(&format!(
                    "SELECT {cols} FROM memories m WHERE m.embedding_model IS NULL ORDER BY m.embedding_model, m.rowid LIMIT ?"
                ))?
                .query_map([lim], read)?
                .collect::<rusqlite::Result<_>>()?,
        };
        if ids.is_none() && rows.len() < limit {
            let more: Vec<_> = c
                .prepare_cached(&format!(
                    "SELECT {cols} FROM memories m WHERE m.embedding_model < ?1 OR m.embedding_model > ?1 ORDER BY m.rowid LIMIT ?2"
                ))?
                .query_map(params![model, lim - rows.len() as i64], read)?
                .collect::<rusqlite::Result<_>>()?;
            rows.extend(more);
        }
        let mut before = c.prepare_cached(
            "SELECT content FROM memories m WHERE m.scope = ?1 AND m.kind = 'conversation'
             AND m.session IS ?2 AND (m.created_at < ?3 OR (m.created_at = ?3 AND m.id < ?4))
             ORDER BY m.created_at DESC, m.id DESC LIMIT 1",
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for (_, mut p, scope, kind, session, created) in rows {
            if kind == "conversation" {
                p.before = before
                    .query_row(params![scope, session, created, p.id], |r| r.get(0))
                    .optional()?;
            }
            out.push(p);
        }
        Ok(out)
    }

    fn count_pending(&self, model: &str) -> Result<u64> {
        let c = self.conn()?;
        let n: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM memories WHERE embedding_model IS NOT ?")?
            .query_row([model], |r| r.get(0))?;
        Ok(n as u64)
    }

    fn set_vectors(
        &self,
        model: &str,
        dim: usize,
        items: &[(String, String, Vec<f32>)],
    ) -> Result<usize> {
        search::check_vectors(model, dim, None, items)?;
        self.write(|tx| {
            let known: Option<i64> = tx
                .prepare_cached("SELECT dim FROM vector_models WHERE model = ?")?
                .query_row([model], |r| r.get(0))
                .optional()?;
            search::check_vectors(model, dim, known.map(|d| d as usize), &[])?;
            if known.is_none() {
                tx.prepare_cached("INSERT INTO vector_models (model, dim) VALUES (?, ?)")?
                    .execute(params![model, dim as i64])?;
            }
            let seq: i64 = tx
                .prepare_cached(
                    "UPDATE vector_models SET version = version + 1 WHERE model = ? RETURNING version",
                )?
                .query_row([model], |r| r.get(0))?;
            let mut st = tx.prepare_cached(
                "UPDATE memories SET embedding_model = ?, embedding = ?, vector_seq = ?
                 WHERE id = ? AND checksum = ?",
            )?;
            let mut n = 0;
            for (id, checksum, v) in items {
                n += st.execute(params![model, crate::embed::to_bytes(v), seq, id, checksum])?;
            }
            Ok(n)
        })
    }

    fn search_vectors(
        &self,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(Signals, f32)>> {
        if limit == 0 || q.view.as_ref().is_some_and(|v| v.is_empty()) {
            return Ok(Vec::new());
        }
        let c = self.conn()?;
        #[cfg(feature = "ann")]
        let mut c = c;
        #[cfg(feature = "ann")]
        if self.view_size(&c, q)? >= self.opts.ann_min_view
            && let Some(hits) = self.search_ann(&mut c, q, model, query, limit)?
        {
            return Ok(hits);
        }
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        p.push(SqlValue::Text(model.to_string()));
        let sql = format!(
            "SELECT m.rowid, m.embedding FROM memories m WHERE {w} AND +m.embedding_model = ?"
        );
        let mut best = search::TopK::new(limit);
        {
            let mut st = c.prepare_cached(&sql)?;
            let mut rows = st.query(params_from_iter(p))?;
            while let Some(r) = rows.next()? {
                let rowid: i64 = r.get(0)?;
                match r.get_ref(1)? {
                    rusqlite::types::ValueRef::Blob(b) if b.len() == query.len() * 4 => {
                        best.push(rowid, crate::embed::dot_bytes(query, b));
                    }
                    _ => {}
                }
            }
        }
        let sims: std::collections::HashMap<i64, f32> = best.into_vec().into_iter().collect();
        let ids: Vec<i64> = sims.keys().copied().collect();
        let mut st = c.prepare_cached(&format!(
            "SELECT {SIGNAL_COLS}, m.rowid FROM json_each(?) AS j CROSS JOIN memories m ON m.rowid = j.value"
        ))?;
        let json = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into());
        let mut hits: Vec<(Signals, f32)> = st
            .query_map([json], |r| {
                let s = read_signals(r)?;
                let rowid: i64 = r.get(7)?;
                Ok((s, sims.get(&rowid).copied().unwrap_or(0.0)))
            })?
            .collect::<rusqlite::Result<_>>()?;
        super::sort_similar(&mut hits);
        Ok(hits)
    }

    fn clear_vectors(&self, keep: Option<&str>) -> Result<u64> {
        let dropped: Vec<String> = self
            .vector_models()?
            .into_iter()
            .map(|(m, _, _)| m)
            .filter(|m| Some(m.as_str()) != keep)
            .collect();
        let n = self.write(|tx| {
            let n = tx.execute(
                "UPDATE memories SET embedding_model = NULL, embedding = NULL
                 WHERE embedding_model IS NOT NULL AND embedding_model IS NOT ?1",
                [keep],
            )?;
            tx.execute(
                "UPDATE archive SET embedding_model = NULL, embedding = NULL
                 WHERE embedding_model IS NOT NULL AND embedding_model IS NOT ?1",
                [keep],
            )?;
            tx.execute("DELETE FROM vector_models WHERE model IS NOT ?1", [keep])?;
            Ok(n as u64)
        })?;
        // Their indexes go too.
        #[cfg(feature = "ann")]
        {
            let mut g = self.ann.loaded.write().unwrap_or_else(|p| p.into_inner());
            for m in &dropped {
                g.remove(m);
                let _ = std::fs::remove_file(ann::side_file(&self.path, m));
            }
        }
        #[cfg(not(feature = "ann"))]
        let _ = dropped;
        Ok(n)
    }

    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
        let c = self.conn()?;
        let mut st = c.prepare_cached(
            "SELECT v.model, v.dim, (SELECT COUNT(*) FROM memories m WHERE m.embedding_model = v.model)
             FROM vector_models v ORDER BY v.model",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)? as usize,
                    r.get::<_, i64>(2)? as u64,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
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
}

impl Store for SqliteStore {
    fn reads_never_wait(&self, with_vectors: bool) -> bool {
        // WAL: a reader never waits for a writer, and the pool opens a
        // connection rather than wait for one. The HNSW index, though, is
        // one per process behind a lock held while it loads, catches up
        // with new vectors (up to 5,000) or is saved: seconds, at times.
        !(with_vectors && cfg!(feature = "ann") && self.opts.ann_min_view < usize::MAX)
    }
}

/// The text index's answers to BM25 ([`search::text_search`]) for one
/// query: one FTS5 lookup per term, inside the view's scope terms; the
/// view's size from `scope_counts`; the candidates' signals checked against
/// view, expiry and filter on the row itself.
struct FtsPostings<'a> {
    c: &'a Connection,
    q: &'a Query,
    /// `scopes : (…) AND `, or empty without a view.
    scope_part: String,
}

impl search::Postings for FtsPostings<'_> {
    type Doc = i64;

    fn docs_with(&mut self, term: &str) -> Result<Vec<i64>> {
        let Some(expr) = fts::fts_terms_expr(&[term.to_string()]) else {
            return Ok(Vec::new());
        };
        let mut st = self
            .c
            .prepare_cached("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?")?;
        let rows = st.query_map([format!("{}content : ({expr})", self.scope_part)], |r| {
            r.get::<_, i64>(0)
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn doc_count(&mut self) -> Result<usize> {
        let mut p = Vec::new();
        let v = view_sql(self.q.view.as_ref(), "m.", &mut p);
        Ok(self
            .c
            .prepare_cached(&format!(
                "SELECT COALESCE(SUM(m.n), 0) FROM scope_counts m WHERE {v}"
            ))?
            .query_row(params_from_iter(p), |r| r.get::<_, i64>(0))? as usize)
    }

    fn signals(&mut self, docs: &[i64]) -> Result<Vec<(i64, Signals)>> {
        let mut p = vec![SqlValue::Text(
            serde_json::to_string(docs).unwrap_or_else(|_| "[]".into()),
        )];
        let w = where_sql(self.q, false, &mut p);
        let sql = format!(
            // CROSS JOIN keeps SQLite from walking the scope index instead
            // of looking each candidate up by rowid.
            "SELECT {SIGNAL_COLS}, m.rowid FROM json_each(?) AS j CROSS JOIN memories m
             ON m.rowid = j.value WHERE {w}"
        );
        let mut st = self.c.prepare_cached(&sql)?;
        let rows = st.query_map(params_from_iter(p), |r| {
            Ok((r.get::<_, i64>(7)?, read_signals(r)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

fn read_session(r: &Row<'_>) -> rusqlite::Result<Session> {
    let scope: String = r.get(1)?;
    Ok(Session {
        id: r.get(0)?,
        scope: Scope::parse(&scope).map_err(|e| conv_err(1, e))?,
        created_at: ts(r, 2)?,
        last_activity_at: ts(r, 3)?,
        archived_at: opt_ts_at(r, 4)?,
        max_bytes: r.get::<_, i64>(5)? as u64,
        bytes: r.get::<_, i64>(6)? as u64,
    })
}
