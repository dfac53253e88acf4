//! The PostgreSQL store (feature `postgres`): one database (one schema of
//! it) shared by any number of processes on any number of machines.
//!
//! Schema (PostgreSQL version 1, `docs/schema.md`): the SQLite store's
//! tables with the same columns (`memories`, `archive`, `history`,
//! `sessions`, `context_log`, `vector_models`), every text column
//! bytewise-ordered (`COLLATE "C"`), tags a `text[]`, and `postings` in
//! place of FTS5: one row per distinct stem (strata's own, `crate::text`)
//! of each active memory with its scope, so the shared BM25 pipeline
//! (`store/search.rs`) ranks exactly as it does over SQLite.
//!
//! Every write is one transaction that first takes the schema's write lock
//! (a transaction-scoped advisory lock), so writers on every node queue as
//! SQLite's do on one file and each sees everything committed before it;
//! reads never wait (MVCC). Migrations run under another advisory lock, so
//! nodes starting together migrate once. A forget deletes the row, its
//! postings, archive copy, history and vector in one transaction, then
//! `VACUUM`s the touched tables (see the README for what that does and
//! does not reach).
//!
//! This file holds the store, its options, opening and the capabilities
//! that are a statement or two each; the rest by concern: `schema.rs`,
//! `pool.rs` (connections, prepared statements), `rows.rs` (row ↔ memory),
//! `sql.rs` (view, filter, order and limit as SQL), `filter_sql.rs`,
//! `writes.rs`, `postings.rs` (text search), `vectors.rs`. No SQL or
//! PostgreSQL type leaves this folder.

use std::fmt;

use jiff::Timestamp;
use postgres::types::ToSql;
use postgres::{Client, Row};

use super::Order;
use super::pg_options::{PostgresOptions, TlsMode, is_postgres_url, redact_url};
use super::search;
use super::{
    Access, Archived, ContextLog, IdPlan, ImportCounts, ImportItem, ImportRules, PendingVector,
    Put, Query, Rows, ScopeCount, Session, Sessions, Store, StoreStats, TextSearch, VectorCounts,
    VectorSearch,
};
use crate::Result;
use crate::error::Error;
use crate::model::{Embedding, Kind, Memory, Provenance};
use crate::rank::Signals;
use crate::scope::{Scope, View};

mod audit;
mod filter_sql;
mod listen;
mod pool;
mod postings;
mod rows;
mod schema;
mod sql;
mod vectors;
mod writes;

use pool::*;
use rows::*;
pub use schema::PG_SCHEMA_VERSION;
use schema::*;
use sql::*;
use writes::*;

/// PostgreSQL's errors as the engine's: [`Error::Unavailable`] when the
/// server cannot be reached or is going away (a closed connection, the
/// SQLSTATE classes 08 connection exception, 53 insufficient resources and
/// 57P operator intervention), [`Error::DiskFull`] for 53100 disk_full,
/// else a storage error; each carries the client's own as its source.
impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Error {
        // 53100 disk_full: the server's disk, not the server, is the matter.
        if e.as_db_error()
            .is_some_and(|db| *db.code() == postgres::error::SqlState::DISK_FULL)
        {
            return Error::DiskFull {
                backend: "postgres",
                source: Box::new(e),
            };
        }
        let gone = match e.as_db_error() {
            None => {
                e.is_closed()
                    || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>())
            }
            Some(db) => {
                let c = db.code().code();
                c.starts_with("08") || c.starts_with("53") || c.starts_with("57P")
            }
        };
        if gone {
            Error::Unavailable {
                backend: "postgres",
                source: Box::new(e),
            }
        } else {
            Error::Storage {
                backend: "postgres",
                source: Box::new(e),
            }
        }
    }
}

/// Rows a batch streams in one COPY (with their postings, sorted, in the
/// next). With postings in the index's order a larger COPY gains
/// (100,000 memories: 1,000 rows a COPY 17,500–18,100/s, 5,000 22,300/s,
/// 10,000 22,700–23,400/s); unsorted, 5,000 was slower than 1,000.
const COPY_ROWS: usize = 10_000;

/// A batch of at least this many memories may be followed by an
/// `ANALYZE` of the tables it filled ([`PostgresStore::analyze_after`]).
const ANALYZE_AFTER: usize = 10_000;

/// The server cannot be reached now, in words of ours.
fn unavailable(msg: String) -> Error {
    Error::Unavailable {
        backend: "postgres",
        source: msg.into(),
    }
}

/// The PostgreSQL store.
pub struct PostgresStore {
    config: postgres::Config,
    display: String,
    opts: PostgresOptions,
    tls: postgres_rustls::MakeTlsConnector,
    pool: Pool,
    write_key: i64,
    /// This process's copies of the stored vectors, by model (`vectors.rs`).
    vectors: std::sync::Arc<vectors::Copies>,
    /// What tells those copies that vectors changed (`listen.rs`).
    listener: std::sync::Arc<listen::Listener>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.stop();
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.display)
            .field("opts", &self.opts)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`)
    /// and brings the schema up to date. Errors name the URL (password
    /// hidden) and what to fix.
    pub fn open(url: &str, opts: PostgresOptions) -> Result<PostgresStore> {
        let (url, opts) = split_schema(url, opts);
        let url = url.as_str();
        let display = redact_url(url);
        if !is_postgres_url(url) {
            return Err(Error::InvalidConfig(format!(
                "store.url: `{display}` is not a PostgreSQL URL (postgres://user@host:port/database)"
            )));
        }
        if opts.schema.is_empty() || opts.schema.len() > 63 {
            return Err(Error::InvalidConfig(format!(
                "store.schema: `{}` must be 1–63 bytes",
                opts.schema
            )));
        }
        let mut config: postgres::Config = url.parse().map_err(|e| {
            Error::InvalidConfig(format!("store.url: `{display}` is not a valid URL: {e}"))
        })?;
        if config.get_password().is_none()
            && let Some(pw) = &opts.password
        {
            config.password(pw);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(opts.connect_timeout);
        }
        if !url.contains("sslmode=") {
            config.ssl_mode(match opts.tls {
                TlsMode::Disable => postgres::config::SslMode::Disable,
                TlsMode::Prefer => postgres::config::SslMode::Prefer,
                TlsMode::Require => postgres::config::SslMode::Require,
            });
        }
        if config.get_application_name().is_none() {
            config.application_name("strata");
        }
        let tls = tls_connector(opts.ca_file.as_deref())?;
        let store = PostgresStore {
            config,
            write_key: lock_key("write", &opts.schema),
            pool: Pool::new(opts.pool_size),
            vectors: Default::default(),
            listener: Default::default(),
            display,
            opts,
            tls,
        };
        let mut c = store.connect_raw()?;
        migrate(&mut c, &store.opts.schema, &store.display)?;
        drop(c);
        Ok(store)
    }

    /// The URL, password hidden.
    pub fn url(&self) -> &str {
        &self.display
    }

    /// The schema strata's tables live in.
    pub fn schema(&self) -> &str {
        &self.opts.schema
    }

    /// How many vectors of `model` this process holds in memory for exact
    /// search (`None` before the first search of the model).
    pub fn vectors_in_memory(&self, model: &str) -> Option<usize> {
        let g = self.vectors.read().unwrap_or_else(|p| p.into_inner());
        g.get(model).map(|v| v.len())
    }

    /// How many vectors the in-memory HNSW index of `model` holds (`None`
    /// until a search of a large view has had one built).
    #[cfg(feature = "ann")]
    pub fn vector_index_size(&self, model: &str) -> Option<usize> {
        let g = self.vectors.read().unwrap_or_else(|p| p.into_inner());
        g.get(model)?.index_size()
    }

    /// Whether this store listens for other nodes' vector changes now
    /// (`LISTEN strata_vectors`, started by the first vector search): while
    /// it does, a search whose copy is current skips a round trip.
    pub fn listening(&self) -> bool {
        self.listener.generation().is_some()
    }

    /// Starts listening for other nodes' vector changes (once, on a
    /// connection outside the pool, in the background).
    fn start_listening(&self) {
        let (config, tls) = (self.config.clone(), self.tls.clone());
        self.listener.start(self.opts.schema.clone(), move || {
            Ok(config.connect(tls.clone())?)
        });
    }

    fn connect_raw(&self) -> Result<Client> {
        self.config.connect(self.tls.clone()).map_err(|e| {
            let code = e.as_db_error().map(|d| d.code().clone());
            let hint = match &code {
                Some(c) if c.code().starts_with("28") => {
                    " (check the user and the password: STRATA_DB_PASSWORD or PGPASSWORD)"
                }
                Some(postgres::error::SqlState::INVALID_CATALOG_NAME) => {
                    " (create the database first: createdb NAME)"
                }
                None => " (is the server running and reachable?)",
                _ => "",
            };
            let mut why = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                let c = c.to_string();
                if !why.contains(&c) {
                    why = format!("{why}: {c}");
                }
                cause = c_source(cause);
            }
            let msg = format!("connecting to {}: {why}{hint}", self.display);
            // A wrong password or a missing database is for the user to
            // fix, not to wait out.
            match &code {
                Some(c) if c.code().starts_with("28") || c.code().starts_with("3D") => {
                    Error::Storage {
                        backend: "postgres",
                        source: msg.into(),
                    }
                }
                _ => unavailable(msg),
            }
        })
    }

    /// A new connection with the schema on its search path.
    fn connect(&self) -> Result<Client> {
        let mut c = self.connect_raw()?;
        c.batch_execute(&format!(
            "SET search_path TO {}",
            quote_ident(&self.opts.schema)
        ))?;
        Ok(c)
    }

    /// Runs `f` in one transaction holding the schema's write lock.
    fn write<T>(&self, f: impl FnOnce(&mut Tx<'_, '_>) -> Result<T>) -> Result<T> {
        let mut c = self.conn()?;
        let key = self.write_key;
        let out = c.tx(|tx| {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&key])?;
            f(tx)
        });
        // This process's searches see its own writes at once, without
        // waiting for the notification.
        self.listener.bump();
        out
    }

    /// Deletes memories everywhere in one transaction, then (with
    /// `vacuum_on_delete`) vacuums the tables.
    fn delete_scrubbed(&self, ids: &[String]) -> Result<usize> {
        let n = self.write(|tx| {
            let mut n = 0;
            let mut models: Vec<String> = Vec::new();
            for id in ids {
                models.extend(vector_model(tx, id)?);
                n += delete_in(tx, id)? as usize;
            }
            models_gone(tx, models)?;
            Ok(n)
        })?;
        if n > 0 && self.opts.vacuum_on_delete {
            self.vacuum();
        }
        Ok(n)
    }

    /// `VACUUM`s the tables a delete touched; best effort (the delete is
    /// committed; a VACUUM that cannot run now is not a failed forget).
    fn vacuum(&self) {
        if let Ok(mut c) = self.conn() {
            let _ = c
                .client
                .batch_execute("VACUUM memories, postings, archive, history");
        }
    }

    /// `ANALYZE`s the tables a batch of `inserted` memories filled when
    /// the planner's statistics miss a tenth of the rows or more (the
    /// share at which autovacuum analyzes, but now, not a minute or more
    /// later); best effort (the batch is committed). Until statistics
    /// count the new rows the planner may scan where an index answers:
    /// recall over 100,000 freshly loaded memories measured p50 15 ms
    /// before autovacuum's analyze ran and 3–5 ms after.
    fn analyze_after(&self, inserted: usize) {
        let Ok(mut c) = self.conn() else { return };
        // What the statistics say the table holds (−1 or 0: never analyzed).
        let known: f64 = c
            .client
            .query_one(
                "SELECT reltuples::float8 FROM pg_class WHERE oid = 'memories'::regclass",
                &[],
            )
            .map_or(-1.0, |r| r.get(0));
        if known <= 0.0 || inserted as f64 >= 0.1 * known {
            let _ = c.client.batch_execute("ANALYZE memories, postings");
        }
    }

    /// `VACUUM ANALYZE` of the memories and their postings: what an
    /// operator (or a benchmark) runs after rewriting many rows at once
    /// (storing every vector of a bulk load), so the dead row versions are
    /// gone and the planner's statistics are current before timing starts.
    pub fn vacuum_analyze(&self) -> Result<()> {
        self.conn()?
            .client
            .batch_execute("VACUUM ANALYZE memories, postings")?;
        Ok(())
    }

    /// Drops the schema and everything in it (tests and `strata migrate`
    /// targets that must start empty use it).
    pub fn drop_schema(&self) -> Result<()> {
        let mut c = self.conn()?;
        c.client.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            quote_ident(&self.opts.schema)
        ))?;
        Ok(())
    }
}

fn c_source<'a>(
    e: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    e.and_then(|e| e.source())
}

/// Takes strata's own `schema=NAME` parameter out of a URL (the client
/// refuses parameters it does not know) into the options.
fn split_schema(url: &str, mut opts: PostgresOptions) -> (String, PostgresOptions) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), opts);
    };
    let mut kept = Vec::new();
    for kv in query.split('&') {
        match kv.strip_prefix("schema=") {
            Some(s) => opts.schema = s.to_string(),
            None => kept.push(kv),
        }
    }
    if kept.is_empty() {
        (base.to_string(), opts)
    } else {
        (format!("{base}?{}", kept.join("&")), opts)
    }
}

/// The rustls connector: the web's roots plus the configured CA file.
fn tls_connector(ca_file: Option<&std::path::Path>) -> Result<postgres_rustls::MakeTlsConnector> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
            Error::InvalidConfig(format!("store.tls_ca_file: {}: {e}", path.display()))
        })?;
        for c in certs {
            let c = c.map_err(|e| {
                Error::InvalidConfig(format!("store.tls_ca_file: {}: {e}", path.display()))
            })?;
            roots.add(c).map_err(|e| {
                Error::InvalidConfig(format!("store.tls_ca_file: {}: {e}", path.display()))
            })?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| unavailable(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    postgres_rustls::set_postgresql_alpn(&mut cfg);
    Ok(postgres_rustls::MakeTlsConnector::new(
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)),
    ))
}

/// The vector model of an active memory that has a vector.
fn vector_model(tx: &mut Tx<'_, '_>, id: &str) -> Result<Option<String>> {
    Ok(tx
        .query_opt(
            "SELECT embedding_model FROM memories WHERE id = $1 AND embedding_model IS NOT NULL",
            &[&id],
        )?
        .map(|r| r.get(0)))
}

/// Marks copies of the vectors of `models` loaded elsewhere out of date,
/// after some were deleted.
fn models_gone(tx: &mut Tx<'_, '_>, mut models: Vec<String>) -> Result<()> {
    models.sort();
    models.dedup();
    for m in &models {
        tx.execute(
            "UPDATE vector_models SET epoch = nextval('vector_epochs') WHERE model = $1",
            &[m],
        )?;
    }
    Ok(())
}

impl Rows for PostgresStore {
    fn put(&self, m: &Memory) -> Result<Put> {
        self.write(|tx| put_in(tx, m.clone(), true))
    }

    fn put_batch(&self, ms: &mut dyn Iterator<Item = Result<Memory>>) -> Result<Vec<Put>> {
        let puts = self.write(|tx| {
            let archive_empty: bool = tx
                .query_one("SELECT NOT EXISTS (SELECT 1 FROM archive)", &[])?
                .get(0);
            // Memories without a key, session or vector (nothing to
            // supersede or bound) go in together, `COPY_ROWS` a COPY;
            // the others one by one, in order.
            let mut out = Vec::new();
            let mut plain: Vec<Memory> = Vec::new();
            for m in ms {
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        // What came before fails first, as one by one.
                        insert_plain(tx, &mut plain, !archive_empty, &mut out)?;
                        return Err(e);
                    }
                };
                if m.key.is_none() && m.session.is_none() && m.embedding.is_none() {
                    plain.push(m);
                    if plain.len() >= COPY_ROWS {
                        insert_plain(tx, &mut plain, !archive_empty, &mut out)?;
                    }
                } else {
                    insert_plain(tx, &mut plain, !archive_empty, &mut out)?;
                    out.push(put_in(tx, m, !archive_empty)?);
                }
            }
            insert_plain(tx, &mut plain, !archive_empty, &mut out)?;
            Ok(out)
        })?;
        if puts.len() >= ANALYZE_AFTER {
            self.analyze_after(puts.len());
        }
        Ok(puts)
    }

    fn import(&self, items: &[ImportItem], rules: &ImportRules) -> Result<ImportCounts> {
        let fenced = !rules.fence.is_everything();
        self.write(|tx| {
            let mut n = ImportCounts::default();
            for it in items {
                let held: Option<String> = tx
                    .query_opt(
                        "SELECT scope FROM memories WHERE id = $1 UNION ALL SELECT scope FROM archive WHERE id = $1 LIMIT 1",
                        &[&it.memory.id],
                    )?
                    .map(|r| r.get(0));
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
                        .query_opt(&format!("SELECT {SESSION_COLS} FROM sessions WHERE id = $1"), &[s])?
                        .map(|r| read_session(&r))
                        .transpose()?,
                    None => None,
                };
                if let Some(sess) = super::import_session(it, held_session.as_ref(), rules)? {
                    tx.execute(
                        "INSERT INTO sessions (id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes)
                         VALUES ($1, $2, $3, $4, NULL, $5, 0)",
                        &[&sess.id, &sess.scope.as_str(), &sess.created_at.as_millisecond(),
                          &sess.last_activity_at.as_millisecond(), &(sess.max_bytes as i64)],
                    )?;
                }
                match &it.archived {
                    Some((at, reason)) => {
                        let mut p = memory_params(m);
                        p.push(Box::new(at.as_millisecond()));
                        p.push(Box::new(reason.clone()));
                        tx.execute_p(
                            &format!("INSERT INTO archive ({COLS}, archived_at, reason) VALUES ({}, $25, $26)", placeholders(1)),
                            &p,
                        )?;
                        n.archived += 1;
                    }
                    None => {
                        if fenced {
                            // A caller limited to scopes writes like any
                            // writer: the session's bound holds.
                            session_delta(tx, m.session.as_deref(), m.size_bytes() as i64, Some(m.updated_at))?;
                        }
                        let seq = match insert_row(tx, m)? {
                            Ok(seq) => seq,
                            Err(e) if unique_violation(&e).is_some() => {
                                return Err(Error::KeyConflict { scope: m.scope.to_string(), key: m.key.clone().unwrap_or_default() });
                            }
                            Err(e) => return Err(e.into()),
                        };
                        index_insert(tx, seq, m)?;
                        if let (Some(s), false) = (&m.session, fenced) {
                            tx.execute(
                                "UPDATE sessions SET bytes = bytes + $1::int8, last_activity_at = GREATEST(last_activity_at, $2::int8) WHERE id = $3",
                                &[&(m.size_bytes() as i64), &m.updated_at.as_millisecond(), s],
                            )?;
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
        let mut c = self.conn()?;
        Ok(get_active(&mut c.cx(), id)?.map(|(_, m)| m))
    }

    fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<(String, Scope)>> {
        let mut c = self.conn()?;
        // `id` is UNIQUE (so indexed, in "C" order) in both tables: each
        // half is a range of its index. The upper bound sorts after every
        // string that starts with `prefix`.
        let end = format!("{prefix}\u{10FFFF}");
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = c.cx().query(
            "SELECT id, scope FROM (
                 SELECT id, scope FROM memories WHERE id >= $1 AND id < $2
                 UNION ALL
                 SELECT id, scope FROM archive WHERE id >= $1 AND id < $2) u
             ORDER BY id LIMIT $3",
            &[&prefix, &end, &limit],
        )?;
        rows.iter()
            .map(|r| {
                let (id, s): (String, String) = (r.get(0), r.get(1));
                let scope = Scope::parse(&s).map_err(|e| Error::Corrupt {
                    what: format!("the scope of {id}"),
                    source: e.to_string().into(),
                })?;
                Ok((id, scope))
            })
            .collect()
    }

    fn update(&self, m: &Memory, expected_version: u64) -> Result<Memory> {
        self.write(|tx| {
            let (seq, old) =
                get_active(tx, &m.id)?.ok_or_else(|| Error::NotFound(m.id.clone()))?;
            if old.version != expected_version {
                return Err(Error::VersionConflict {
                    id: m.id.clone(),
                    expected: expected_version,
                    current: old.version,
                });
            }
            if let Some(k) = &m.key {
                let taken: bool = tx
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM memories WHERE scope = $1 AND key = $2 AND id <> $3)",
                        &[&m.scope.as_str(), k, &m.id],
                    )?
                    .get(0);
                if taken {
                    return Err(Error::KeyConflict {
                        scope: m.scope.to_string(),
                        key: k.clone(),
                    });
                }
            }
            let mut new = m.clone();
            new.version = expected_version + 1;
            new.created_at = old.created_at;
            new.session = old.session.clone();
            let delta = new.size_bytes() as i64 - old.size_bytes() as i64;
            session_delta(tx, old.session.as_deref(), delta, Some(new.updated_at))?;
            push_history(tx, &old)?;
            replace_row(tx, seq, &old, &new)?;
            Ok(new)
        })
    }

    fn delete(&self, ids: &[String]) -> Result<usize> {
        self.delete_scrubbed(ids)
    }

    fn delete_moved(&self, moved: &[(String, u64)]) -> Result<Vec<String>> {
        // Every write of the store holds its advisory lock: no update
        // comes between the version read here and the delete.
        self.write(|tx| {
            let mut out = Vec::new();
            let mut models: Vec<String> = Vec::new();
            for (id, version) in moved {
                let held: Option<i64> = tx
                    .query_opt(
                        "SELECT version FROM memories WHERE id = $1
                         UNION ALL SELECT version FROM archive WHERE id = $1 LIMIT 1",
                        &[id],
                    )?
                    .map(|r| r.get(0));
                if held != Some(*version as i64) {
                    // Changed since it was read, or gone: it stays.
                    continue;
                }
                models.extend(vector_model(tx, id)?);
                delete_in(tx, id)?;
                out.push(id.clone());
            }
            models_gone(tx, models)?;
            Ok(out)
        })
    }

    fn scrub(&self) -> Result<()> {
        if self.opts.vacuum_on_delete {
            self.vacuum();
        }
        Ok(())
    }

    fn query(&self, q: &Query) -> Result<Vec<Memory>> {
        let mut c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        let lim = limit_sql(q, &mut p);
        let sql = format!(
            "SELECT {COLS} FROM memories m WHERE {w} {} {lim}",
            order_sql(q.order)
        );
        c.cx().query_p(&sql, &p)?.iter().map(read_memory).collect()
    }

    fn query_signals(&self, q: &Query) -> Result<Vec<Signals>> {
        let mut c = self.conn()?;
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
        c.cx().query_p(&sql, &p)?.iter().map(read_signals).collect()
    }

    fn get_many(&self, ids: &[String]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.conn()?;
        let cols = COLS
            .split(", ")
            .map(|col| format!("m.{col}"))
            .collect::<Vec<_>>()
            .join(", ");
        c.cx()
            .query(
                &format!(
                    "SELECT {cols} FROM unnest($1::text[]) WITH ORDINALITY AS j(id, n)
                     JOIN memories m ON m.id = j.id ORDER BY j.n"
                ),
                &[&ids],
            )?
            .iter()
            .map(read_memory)
            .collect()
    }

    fn count(&self, q: &Query) -> Result<u64> {
        let mut c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        let r = c
            .cx()
            .query_p(&format!("SELECT COUNT(*) FROM memories m WHERE {w}"), &p)?;
        Ok(r.first().map_or(0, |r| r.get::<_, i64>(0)) as u64)
    }

    fn count_by_kind(&self, q: &Query) -> Result<std::collections::BTreeMap<String, u64>> {
        let mut c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        let rows = c.cx().query_p(
            &format!("SELECT m.kind, COUNT(*) FROM memories m WHERE {w} GROUP BY m.kind"),
            &p,
        )?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
            .collect())
    }

    fn list_scopes(&self) -> Result<Vec<ScopeCount>> {
        let mut c = self.conn()?;
        let rows = c.cx().query(
            "SELECT scope, SUM(a)::int8, SUM(b)::int8 FROM (
                 SELECT scope, COUNT(*) AS a, 0 AS b FROM memories GROUP BY scope
                 UNION ALL SELECT scope, 0, COUNT(*) FROM archive GROUP BY scope) s
             GROUP BY scope ORDER BY scope",
            &[],
        )?;
        rows.iter()
            .map(|r| {
                let s: String = r.get(0);
                Ok(ScopeCount {
                    scope: Scope::parse(&s).map_err(|e| Error::Corrupt {
                        what: "column `scope` of a stored row".into(),
                        source: e.to_string().into(),
                    })?,
                    memories: r.get::<_, i64>(1) as u64,
                    archived: r.get::<_, i64>(2) as u64,
                })
            })
            .collect()
    }

    fn stats(&self) -> Result<StoreStats> {
        let mut c = self.conn()?;
        let mut cx = c.cx();
        let r = cx.query_one(
            "SELECT (SELECT COUNT(*) FROM memories), (SELECT COUNT(*) FROM archive),
                    (SELECT COUNT(*) FROM history), (SELECT COUNT(*) FROM sessions),
                    (SELECT COUNT(DISTINCT scope) FROM memories),
                    (SELECT COALESCE(SUM(tokens), 0)::int8 FROM memories),
                    (SELECT MAX(version) FROM schema_version),
                    (SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
                       JOIN pg_namespace n ON n.oid = c.relnamespace
                       WHERE n.nspname = current_schema() AND c.relkind = 'r')",
            &[],
        )?;
        let mut s = StoreStats {
            backend: "postgres".into(),
            memories: r.get::<_, i64>(0) as u64,
            archived: r.get::<_, i64>(1) as u64,
            history: r.get::<_, i64>(2) as u64,
            sessions: r.get::<_, i64>(3) as u64,
            scopes: r.get::<_, i64>(4) as u64,
            tokens: r.get::<_, i64>(5) as u64,
            schema_version: r.get(6),
            file_bytes: r.get::<_, i64>(7) as u64,
            ..StoreStats::default()
        };
        for r in cx.query(
            "SELECT scope, kind, COUNT(*) FROM memories GROUP BY scope, kind",
            &[],
        )? {
            let (scope, kind, n): (String, String, i64) = (r.get(0), r.get(1), r.get(2));
            let tier = Scope::parse(&scope)
                .map(|s| s.tier().as_str())
                .unwrap_or("project");
            *s.by_tier.entry(tier.into()).or_default() += n as u64;
            *s.by_kind.entry(kind).or_default() += n as u64;
        }
        Ok(s)
    }

    fn touch(&self, accesses: &[Access]) -> Result<()> {
        if accesses.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = accesses.iter().map(|a| a.id.as_str()).collect();
        let counts: Vec<i64> = accesses.iter().map(|a| a.count as i64).collect();
        let ats: Vec<i64> = accesses.iter().map(|a| a.at.as_millisecond()).collect();
        // Access statistics are not acknowledged writes: no wait for the
        // WAL flush. The write lock keeps row locks in one order with the
        // other writers.
        self.write(|tx| {
            tx.execute("SET LOCAL synchronous_commit = off", &[])?;
            tx.execute(
                "UPDATE memories m SET access_count = m.access_count + a.n,
                     last_accessed_at = GREATEST(COALESCE(m.last_accessed_at, a.at), a.at)
                 FROM (SELECT id, SUM(n)::int8 AS n, MAX(at) AS at
                       FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(id, n, at) GROUP BY id) a
                 WHERE m.id = a.id",
                &[&ids, &counts, &ats],
            )?;
            Ok(())
        })
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
        let mut c = self.conn()?;
        let mut p = Vec::new();
        let w = where_sql(q, true, &mut p);
        let lim = limit_sql(q, &mut p);
        let sql = format!(
            "SELECT {COLS}, archived_at, reason FROM archive m WHERE {w} {} {lim}",
            order_sql(q.order)
        );
        c.cx()
            .query_p(&sql, &p)?
            .iter()
            .map(|r| {
                let at: i64 = r.get(24);
                Ok(Archived {
                    memory: read_memory(r)?,
                    archived_at: Timestamp::from_millisecond(at).map_err(|e| Error::Corrupt {
                        what: "column `archived_at` of a stored row".into(),
                        source: Box::new(e),
                    })?,
                    reason: r.get(25),
                })
            })
            .collect()
    }

    fn restore(&self, ids: &[String]) -> Result<usize> {
        self.write(|tx| {
            let mut n = 0;
            for id in ids {
                let row = tx.query_opt(
                    &format!("SELECT {COLS}, seq FROM archive WHERE id = $1"),
                    &[id],
                )?;
                let Some(row) = row else { continue };
                let (aseq, m): (i64, Memory) = (row.get(24), read_memory(&row)?);
                if let Some(k) = &m.key {
                    let taken: bool = tx
                        .query_one(
                            "SELECT EXISTS (SELECT 1 FROM memories WHERE scope = $1 AND key = $2)",
                            &[&m.scope.as_str(), k],
                        )?
                        .get(0);
                    if taken {
                        return Err(Error::KeyConflict {
                            scope: m.scope.to_string(),
                            key: k.clone(),
                        });
                    }
                }
                let seq: i64 = tx
                    .query_one(
                        &format!(
                            "INSERT INTO memories ({COLS}) SELECT {COLS} FROM archive WHERE seq = $1 RETURNING seq"
                        ),
                        &[&aseq],
                    )?
                    .get(0);
                tx.execute("DELETE FROM archive WHERE seq = $1", &[&aseq])?;
                index_insert(tx, seq, &m)?;
                session_delta(tx, m.session.as_deref(), m.size_bytes() as i64, None)?;
                n += 1;
            }
            Ok(n)
        })
    }

    fn history(&self, id: &str) -> Result<Vec<Memory>> {
        let mut c = self.conn()?;
        let rows = c.cx().query(
            "SELECT doc FROM history WHERE id = $1 ORDER BY version",
            &[&id],
        )?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| Error::field("history", e))
            })
            .collect()
    }

    fn put_history(&self, m: &Memory) -> Result<()> {
        self.write(|tx| push_history(tx, m))
    }
}

impl Sessions for PostgresStore {
    fn create_session(&self, s: &Session) -> Result<()> {
        self.write(|tx| {
            let n = tx.execute(
                "INSERT INTO sessions (id, scope, created_at, last_activity_at, archived_at, max_bytes, bytes)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
                &[
                    &s.id,
                    &s.scope.as_str(),
                    &s.created_at.as_millisecond(),
                    &s.last_activity_at.as_millisecond(),
                    &s.archived_at.map(|t| t.as_millisecond()),
                    &(s.max_bytes as i64),
                    &(s.bytes as i64),
                ],
            )?;
            if n == 0 {
                return Err(Error::DuplicateSession(s.id.clone()));
            }
            Ok(())
        })
    }

    fn remove_empty_session(&self, id: &str) -> Result<bool> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM sessions WHERE id = $1 AND bytes = 0 AND archived_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM memories WHERE session = $1)
                   AND NOT EXISTS (SELECT 1 FROM archive WHERE session = $1)",
                &[&id],
            )?;
            Ok(n > 0)
        })
    }

    fn get_session(&self, id: &str) -> Result<Option<Session>> {
        let mut c = self.conn()?;
        c.cx()
            .query_opt(
                &format!("SELECT {SESSION_COLS} FROM sessions WHERE id = $1"),
                &[&id],
            )?
            .map(|r| read_session(&r))
            .transpose()
    }

    fn list_sessions(&self) -> Result<Vec<Session>> {
        let mut c = self.conn()?;
        c.cx()
            .query(
                &format!("SELECT {SESSION_COLS} FROM sessions ORDER BY created_at, id"),
                &[],
            )?
            .iter()
            .map(read_session)
            .collect()
    }

    fn archive_session(&self, id: &str, at: Timestamp) -> Result<Session> {
        self.write(|tx| {
            let exists: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)",
                    &[&id],
                )?
                .get(0);
            if !exists {
                return Err(Error::SessionNotFound(id.into()));
            }
            let ids: Vec<String> = tx
                .query(
                    "SELECT id FROM memories WHERE session = $1 ORDER BY seq",
                    &[&id],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            for mid in ids {
                archive_in(tx, &mid, "session_archived", at)?;
            }
            tx.execute(
                "UPDATE sessions SET archived_at = COALESCE(archived_at, $1) WHERE id = $2",
                &[&at.as_millisecond(), &id],
            )?;
            Ok(())
        })?;
        self.get_session(id)?
            .ok_or_else(|| Error::SessionNotFound(id.into()))
    }
}

impl ContextLog for PostgresStore {
    fn log_context(&self, id: &str, at: Timestamp, doc: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO context_log (id, created_at, doc) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
                &[&id, &at.as_millisecond(), &doc],
            )?;
            Ok(())
        })
    }

    fn context_log(&self, id: &str) -> Result<Option<String>> {
        let mut c = self.conn()?;
        Ok(c.cx()
            .query_opt("SELECT doc FROM context_log WHERE id = $1", &[&id])?
            .map(|r| r.get(0)))
    }

    fn context_logs(&self) -> Result<Vec<(String, Timestamp, String)>> {
        let mut c = self.conn()?;
        c.cx()
            .query(
                "SELECT id, created_at, doc FROM context_log ORDER BY id",
                &[],
            )?
            .iter()
            .map(|r| {
                let at = Timestamp::from_millisecond(r.get(1)).map_err(|e| Error::Corrupt {
                    what: "column `created_at` of a context log row".into(),
                    source: Box::new(e),
                })?;
                Ok((r.get(0), at, r.get(2)))
            })
            .collect()
    }
}

impl Store for PostgresStore {
    fn take_lease(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool> {
        let mut c = self.conn()?;
        let n = c.cx().execute(
            "INSERT INTO leases (name, holder, until) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET holder = $2, until = $3
             WHERE leases.holder = $2 OR leases.until <= $4",
            &[
                &name,
                &holder,
                &until.as_millisecond(),
                &now.as_millisecond(),
            ],
        )?;
        Ok(n == 1)
    }

    fn end_lease(&self, name: &str, holder: &str) -> Result<()> {
        let mut c = self.conn()?;
        c.cx().execute(
            "DELETE FROM leases WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )?;
        Ok(())
    }
}
