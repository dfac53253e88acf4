//! The schema: the memory columns (one list for `memories` and `archive`),
//! the migrations, and the check that a schema is strata's. Every text
//! column compares bytewise (`COLLATE "C"`), as SQLite and the in-memory
//! store do: scope ranges, id tie-breaks and text filters order alike on
//! every backend whatever the database's locale.

use super::*;

/// Newest PostgreSQL schema version this build writes and reads.
pub const PG_SCHEMA_VERSION: i64 = 4;

pub(super) const COLS: &str = "id, scope, kind, role, content, payload, key, tags, importance, source, session, \
     created_at, updated_at, last_accessed_at, access_count, expires_at, pinned, sensitive, tokens, \
     checksum, version, embedding_model, embedding, provenance";

/// `$1, …, $24`, the placeholders of [`COLS`].
pub(super) fn placeholders(from: usize) -> String {
    (from..from + 24)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn col_defs() -> &'static str {
    r#"id TEXT COLLATE "C" NOT NULL UNIQUE,
     scope TEXT COLLATE "C" NOT NULL,
     kind TEXT COLLATE "C" NOT NULL,
     role TEXT COLLATE "C",
     content TEXT COLLATE "C" NOT NULL,
     payload TEXT,
     key TEXT COLLATE "C",
     tags TEXT[] COLLATE "C" NOT NULL DEFAULT '{}',
     importance DOUBLE PRECISION NOT NULL,
     source TEXT COLLATE "C" NOT NULL,
     session TEXT COLLATE "C",
     created_at BIGINT NOT NULL,
     updated_at BIGINT NOT NULL,
     last_accessed_at BIGINT,
     access_count BIGINT NOT NULL DEFAULT 0,
     expires_at BIGINT,
     pinned BOOLEAN NOT NULL DEFAULT FALSE,
     sensitive BOOLEAN NOT NULL DEFAULT FALSE,
     tokens BIGINT NOT NULL,
     checksum TEXT COLLATE "C" NOT NULL,
     version BIGINT NOT NULL,
     embedding_model TEXT COLLATE "C",
     embedding BYTEA,
     provenance TEXT"#
}

/// Version 1: every table the SQLite store's version 3 has, with the text
/// index as a table of strata's own stems (`postings`: one row per distinct
/// stem of a memory, with the memory's scope so a view's lookup is one
/// range of the primary key) instead of FTS5. A model's vectors carry
/// stamps (`memories.vector_seq` from `vector_models.version`) and an
/// epoch, unique across models and their re-creations, that every forget
/// renews: what a process's copy of the vectors (`vectors.rs`) syncs by.
pub(super) fn migration_1() -> String {
    format!(
        r#"CREATE TABLE memories (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, {cols}, vector_seq BIGINT);
         CREATE INDEX memories_scope ON memories(scope, created_at, id);
         CREATE INDEX memories_session ON memories(session) WHERE session IS NOT NULL;
         CREATE UNIQUE INDEX memories_scope_key ON memories(scope, key) WHERE key IS NOT NULL;
         CREATE INDEX memories_embedding_model ON memories(embedding_model, vector_seq);
         CREATE INDEX memories_unembedded ON memories(seq) WHERE embedding_model IS NULL;
         CREATE TABLE postings (term TEXT COLLATE "C" NOT NULL, scope TEXT COLLATE "C" NOT NULL,
             seq BIGINT NOT NULL, PRIMARY KEY (term, scope, seq));
         CREATE TABLE archive (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, {cols},
             archived_at BIGINT NOT NULL, reason TEXT NOT NULL);
         CREATE INDEX archive_scope ON archive(scope, created_at, id);
         CREATE INDEX archive_session ON archive(session) WHERE session IS NOT NULL;
         CREATE TABLE history (id TEXT COLLATE "C" NOT NULL, version BIGINT NOT NULL, doc TEXT NOT NULL,
             PRIMARY KEY (id, version));
         CREATE TABLE sessions (id TEXT COLLATE "C" PRIMARY KEY, scope TEXT COLLATE "C" NOT NULL,
             created_at BIGINT NOT NULL, last_activity_at BIGINT NOT NULL, archived_at BIGINT,
             max_bytes BIGINT NOT NULL, bytes BIGINT NOT NULL DEFAULT 0);
         CREATE TABLE context_log (id TEXT COLLATE "C" PRIMARY KEY, created_at BIGINT NOT NULL, doc TEXT NOT NULL);
         CREATE SEQUENCE vector_epochs;
         CREATE TABLE vector_models (model TEXT COLLATE "C" PRIMARY KEY, dim BIGINT NOT NULL,
             version BIGINT NOT NULL DEFAULT 0, epoch BIGINT NOT NULL DEFAULT nextval('vector_epochs'));"#,
        cols = col_defs()
    )
}

/// Version 2: work shared by many nodes. `leases` (`Store::take_lease`)
/// keep upkeep and a project's eviction to one node at a time; the embed
/// worker claims the memories it embeds (`memories.embed_claim`, the claim's
/// end in ms, taken with `FOR UPDATE SKIP LOCKED`) so that no memory is
/// embedded by two nodes, and a node that dies mid-batch leaves claims that
/// run out. Every statement that changes `vector_models` (vectors stamped,
/// a model cleared, a forget's new epoch) notifies `strata_vectors` with
/// the schema's name at commit, which wakes the nodes' copies of the
/// vectors (`listen.rs`). The index on the vector stamp leaves out the rows
/// without a vector: every insert paid for an entry no search reads.
pub(super) fn migration_2() -> String {
    r#"DROP INDEX memories_embedding_model;
     CREATE INDEX memories_embedding_model ON memories(embedding_model, vector_seq)
         WHERE embedding_model IS NOT NULL;
     CREATE TABLE leases (name TEXT COLLATE "C" PRIMARY KEY, holder TEXT COLLATE "C" NOT NULL,
         until BIGINT NOT NULL);
     ALTER TABLE memories ADD COLUMN embed_claim BIGINT;
     CREATE FUNCTION strata_notify_vectors() RETURNS trigger LANGUAGE plpgsql AS
         $f$ BEGIN PERFORM pg_notify('strata_vectors', TG_TABLE_SCHEMA); RETURN NULL; END $f$;
     CREATE TRIGGER vector_models_notify AFTER INSERT OR UPDATE OR DELETE ON vector_models
         FOR EACH STATEMENT EXECUTE FUNCTION strata_notify_vectors();"#
        .into()
}

/// Version 3: the audit trail (`crate::audit`), as in SQLite's version 5:
/// `audit` rows (`at` in microseconds, `scopes` and `ids` JSON text) and
/// the one `audit_chain` row with the chain's anchor and head. Appends
/// lock that row (`SELECT … FOR UPDATE`), so the nodes sharing the schema
/// append one at a time without taking the memories' write lock.
pub(super) fn migration_3() -> String {
    format!(
        r#"CREATE TABLE audit (seq BIGINT PRIMARY KEY, at BIGINT NOT NULL, actor TEXT COLLATE "C" NOT NULL,
             op TEXT COLLATE "C" NOT NULL, scopes TEXT COLLATE "C" NOT NULL, count BIGINT NOT NULL,
             ids TEXT NOT NULL, ids_omitted BIGINT NOT NULL, outcome TEXT COLLATE "C" NOT NULL,
             prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
         CREATE INDEX audit_at ON audit(at);
         CREATE TABLE audit_chain (id INT PRIMARY KEY CHECK (id = 1),
             anchor_seq BIGINT NOT NULL, anchor_hash TEXT NOT NULL,
             head_seq BIGINT NOT NULL, head_hash TEXT NOT NULL);
         INSERT INTO audit_chain VALUES (1, 1, '{g}', 0, '{g}');"#,
        g = crate::audit::GENESIS
    )
}

/// Version 4: learned memories by scope (a partial index), as in SQLite's
/// version 6, so text search leaves a view's learned memories out of
/// BM25's statistics without reading the view.
pub(super) fn migration_4() -> String {
    "CREATE INDEX memories_learned ON memories(scope) WHERE source = 'learned';".into()
}

/// Creates the schema if needed and brings it up to date, under an advisory
/// lock so that nodes starting together migrate once. Refuses a schema
/// holding another application's tables, and one a newer strata wrote.
pub(super) fn migrate(c: &mut Client, schema: &str, display: &str) -> Result<()> {
    let mut tx = c.transaction()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&lock_key("migrate", schema)],
    )?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {0}; SET LOCAL search_path TO {0}",
        quote_ident(schema)
    ))?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
            &[&schema],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !tables.is_empty() && !tables.iter().any(|t| t == "schema_version") {
        let mut shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        if tables.len() > shown.len() {
            shown.push("…");
        }
        return Err(Error::ForeignDatabase {
            path: format!("{display} (schema `{schema}`)"),
            tables: shown.join(", "),
        });
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL, applied_at BIGINT NOT NULL)",
    )?;
    let current: i64 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])?
        .get(0);
    if current > PG_SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: PG_SCHEMA_VERSION,
        });
    }
    let migrations: [fn() -> String; 4] = [migration_1, migration_2, migration_3, migration_4];
    for (i, m) in migrations.iter().enumerate() {
        let v = i as i64 + 1;
        if v > current {
            tx.batch_execute(&m())?;
            tx.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES ($1, $2)",
                &[&v, &Timestamp::now().as_millisecond()],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// A PostgreSQL identifier, quoted.
pub(super) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The advisory lock key of `what` in `schema` (FNV-1a of both): locks of
/// one schema never block another's.
pub(super) fn lock_key(what: &str, schema: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "strata"
        .bytes()
        .chain(what.bytes())
        .chain([0])
        .chain(schema.bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}
