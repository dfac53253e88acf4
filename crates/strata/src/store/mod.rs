//! Storage behind a narrow trait.
//!
//! [`Store`] is everything the engine needs from a backend: atomic puts
//! (with key supersession and session bounds), compare-and-swap updates,
//! deletion everywhere, filtered queries, scoped full-text search, the
//! archive, and sessions. Two backends implement it and pass one conformance
//! suite (`tests/it/conformance.rs`): [`MemoryStore`] (ephemeral, and the
//! model the others are checked against) and [`SqliteStore`] (the default).
//!
//! A store validates nothing about memory fields (the engine does) but it
//! owns every invariant that must hold across processes: (scope, key) is
//! unique among active memories, versions only grow, a session never exceeds
//! its bound, and a delete leaves no copy behind.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::Result;
use crate::audit::{AuditChain, AuditEntry, AuditEvent, AuditPrune, AuditQuery};
use crate::filter::Filter;
use crate::model::Memory;
use crate::rank::Signals;
use crate::scope::{Fence, Scope, View};

pub mod copy;
#[cfg(feature = "ann")]
pub(crate) mod hnsw;
pub(crate) mod hurry;
pub mod memory;
#[path = "postgres/options.rs"]
pub mod pg_options;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod search;
pub mod sqlite;
pub use hurry::{Refusal, Refused, WriteTurn, refusals, without_waiting};

pub use copy::{StoreDigest, copy_store, store_digest};
pub use memory::MemoryStore;
pub use pg_options::{PostgresOptions, TlsMode, is_postgres_url, redact_url};
#[cfg(feature = "postgres")]
pub use postgres::{PG_SCHEMA_VERSION, PostgresStore};
pub use sqlite::{
    Conversion, Durability, SCHEMA_VERSION, SqliteOptions, SqliteStore, StoreKey, convert_with,
};

/// Result order of a [`Query`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// `created_at` descending, then id descending.
    #[default]
    Newest,
    /// `created_at` ascending, then id ascending.
    Oldest,
}

/// Which memories a read selects.
#[derive(Clone, Debug)]
pub struct Query {
    /// Scopes visible; `None` means every scope and is for engine-internal
    /// use only (exports of the whole file, session upkeep).
    pub view: Option<View>,
    /// Conditions.
    pub filter: Filter,
    /// Order.
    pub order: Order,
    /// At most this many.
    pub limit: Option<usize>,
    /// Skip this many first.
    pub offset: usize,
    /// "Now", for leaving out expired memories.
    pub now: Timestamp,
    /// Keep expired memories.
    pub include_expired: bool,
}

impl Query {
    /// Everything visible in `view`, newest first.
    pub fn view(view: View, now: Timestamp) -> Query {
        Query {
            view: Some(view),
            filter: Filter::all(),
            order: Order::Newest,
            limit: None,
            offset: 0,
            now,
            include_expired: false,
        }
    }

    /// Every memory in every scope (engine-internal).
    pub fn everything(now: Timestamp) -> Query {
        Query {
            view: None,
            ..Query::view(View::default(), now)
        }
    }

    /// With a filter.
    pub fn filter(mut self, f: Filter) -> Query {
        self.filter = f;
        self
    }

    /// With a limit.
    pub fn limit(mut self, n: usize) -> Query {
        self.limit = Some(n);
        self
    }

    /// With an order.
    pub fn order(mut self, o: Order) -> Query {
        self.order = o;
        self
    }

    /// Keeping expired memories.
    pub fn include_expired(mut self, yes: bool) -> Query {
        self.include_expired = yes;
        self
    }

    /// Whether the query's view and filter select `m` (expiry included).
    pub fn selects(&self, m: &Memory) -> bool {
        self.view.as_ref().is_none_or(|v| v.contains(&m.scope))
            && (self.include_expired || !m.is_expired(self.now))
            && self.filter.matches(m)
    }
}

/// A memory moved out of the active set, with when and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Archived {
    /// The memory as it was.
    pub memory: Memory,
    /// When it was archived.
    pub archived_at: Timestamp,
    /// Why: `evicted`, `expired`, `task_completed`, `session_archived`, …
    pub reason: String,
}

/// What [`Rows::put`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Put {
    /// A new memory was stored.
    Inserted(Memory),
    /// An active memory with the same (scope, key) was superseded: it keeps
    /// its id, its version grew, and the old version went to history.
    Superseded(Memory),
}

impl Put {
    /// The memory as stored.
    pub fn memory(&self) -> &Memory {
        match self {
            Put::Inserted(m) | Put::Superseded(m) => m,
        }
    }

    /// The memory as stored, by value.
    pub fn into_memory(self) -> Memory {
        match self {
            Put::Inserted(m) | Put::Superseded(m) => m,
        }
    }
}

/// One memory as exported: the memory, its archive mark, its history.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportItem {
    /// The input line it came from (1-based; 0 when it came from no line),
    /// for errors.
    pub line: usize,
    /// The memory.
    pub memory: Memory,
    /// When and why it was archived, if it was.
    pub archived: Option<(Timestamp, String)>,
    /// Earlier versions, oldest first.
    pub history: Vec<Memory>,
}

/// What an import does with an id that already exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// Fail, importing nothing.
    #[default]
    Error,
    /// Keep the stored memory and skip the line.
    Skip,
    /// Replace the stored memory (everywhere) with the line.
    Replace,
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImportCounts {
    /// Memories stored (active or archived).
    pub imported: usize,
    /// Of those, stored in the archive.
    pub archived: usize,
    /// Lines skipped because the id existed.
    pub skipped: usize,
    /// Lines that replaced a stored memory.
    pub replaced: usize,
    /// History versions stored.
    pub history: usize,
}

/// A conversation or work session: a size-bounded group of memories.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    /// Session id (one scope segment).
    pub id: String,
    /// Scope new memories of the session go to by default.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "project/acme"))]
    pub scope: Scope,
    /// When it was created.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// Last write into it.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_activity_at: Timestamp,
    /// Set once archived; archived sessions take no writes.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub archived_at: Option<Timestamp>,
    /// Bound on `bytes`.
    pub max_bytes: u64,
    /// Bytes (content + payload) of its active memories.
    pub bytes: u64,
    /// Held only in this process's hot tier: its memories never touch the
    /// store and vanish with the process (`Engine::open_ephemeral_session`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ephemeral: bool,
}

/// Number of memories in one scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScopeCount {
    /// The scope.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "project/acme"))]
    pub scope: Scope,
    /// Active memories.
    pub memories: u64,
    /// Archived memories.
    pub archived: u64,
}

/// Store-wide figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Backend name.
    pub backend: String,
    /// Active memories.
    pub memories: u64,
    /// Archived memories.
    pub archived: u64,
    /// Superseded versions kept as history.
    pub history: u64,
    /// Sessions (open and archived).
    pub sessions: u64,
    /// Distinct scopes with active memories.
    pub scopes: u64,
    /// Sum of `tokens` over active memories.
    pub tokens: u64,
    /// Active memories per lifetime tier.
    pub by_tier: std::collections::BTreeMap<String, u64>,
    /// Active memories per kind.
    pub by_kind: std::collections::BTreeMap<String, u64>,
    /// Bytes on disk (0 for in-memory).
    pub file_bytes: u64,
    /// Schema version (0 for in-memory).
    pub schema_version: i64,
    /// Memories and bytes per storage tier (`warm`: the store, active and
    /// archived; `cold`: segment files, present when the cold tier is on).
    /// Filled by the engine; a store leaves it empty.
    #[serde(default)]
    pub storage_tiers: std::collections::BTreeMap<String, TierFigures>,
}

/// The archive reason of a memory demoted to the cold tier (idle, or its
/// decayed importance under the floor): only these come back to the store
/// when recalls keep returning them.
pub const DEMOTED: &str = "demoted";

/// Memories and bytes of one storage tier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierFigures {
    /// Memories held.
    pub memories: u64,
    /// Bytes on disk (0 for an in-memory store); for the hot tier, the
    /// content and payload bytes its rings hold in this process's memory.
    pub bytes: u64,
    /// Where the tier is, when not in the store: the cold tier's directory
    /// or `s3://bucket/prefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// A memory waiting for a vector: what the embedder reads.
/// Reads of one memory, recorded together (see [`Rows::touch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub id: String,
    /// How many reads.
    pub count: u64,
    /// When the last of them happened.
    pub at: Timestamp,
}

impl Access {
    /// One read of `id` at `at`.
    pub fn one(id: impl Into<String>, at: Timestamp) -> Access {
        Access {
            id: id.into(),
            count: 1,
            at,
        }
    }
}

/// Active memories with a vector of one model, and those waiting for one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VectorCounts {
    /// Memories that have a vector of the model.
    pub vectors: u64,
    /// Memories with no vector, or another model's.
    pub pending: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PendingVector {
    /// The memory id.
    pub id: String,
    /// Its checksum when read; the vector is stored only if it still matches.
    pub checksum: String,
    /// Its content.
    pub content: String,
    /// For a conversation turn, the content of the turn before it in the
    /// same scope and session (the question a reply answers).
    pub before: Option<String>,
}

/// Sorts vector hits most similar first; ties break on id (descending), as
/// every ranking does.
pub fn sort_similar(hits: &mut [(Signals, f32)]) {
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.id.cmp(&a.0.id)));
}

/// Memories: writes (one transaction each), reads by id and query, the
/// archive and history. A store owns every invariant that must hold
/// across processes: (scope, key) unique among active memories, versions
/// that only grow, a session never over its bound, deletes that leave no
/// copy behind.
pub trait Rows {
    /// Stores a new memory, or supersedes the active memory with the same
    /// (scope, key). Fails with `DuplicateId` if the id exists, and with a
    /// session error if the memory's session is missing, archived or full.
    fn put(&self, m: &Memory) -> Result<Put>;
    /// Like [`Rows::put`] for many memories, all in one transaction: either
    /// every memory is stored or none is. The memories are pulled from an
    /// iterator so a caller can prepare the next ones (count tokens, embed)
    /// while earlier ones are written; an `Err` item aborts the batch.
    fn put_batch(&self, ms: &mut dyn Iterator<Item = Result<Memory>>) -> Result<Vec<Put>>;
    /// Stores exported memories exactly as given (ids, versions, archive
    /// marks, history), all in one transaction.
    /// `rules.fence` limits what the import may touch: a line whose id is
    /// held outside the fence is stored under a fresh id, and a line joins
    /// a session only as a write inside the fence could; an id or session
    /// outside it is never changed or revealed.
    fn import(&self, items: &[ImportItem], rules: &ImportRules) -> Result<ImportCounts>;
    /// An active memory by id.
    fn get(&self, id: &str) -> Result<Option<Memory>>;
    /// Ids of active and archived memories that start with `prefix`, each
    /// with its scope, in id order, at most `limit` (an indexed range, so
    /// id prefixes resolve without a scan).
    fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<(String, Scope)>>;
    /// Replaces the content fields of an active memory if its current version
    /// is `expected_version`; the stored version becomes `expected_version +
    /// 1` and the old version goes to history.
    fn update(&self, m: &Memory, expected_version: u64) -> Result<Memory>;
    /// Deletes memories everywhere (active, archive, history, text index);
    /// returns how many ids existed.
    fn delete(&self, ids: &[String]) -> Result<usize>;
    /// Deletes memories that now live elsewhere (moved to the cold tier),
    /// active or archived, in one transaction, each only while the store
    /// holds the version that was moved (an active memory updated since it
    /// was read stays). Like [`Rows::delete`] but without the work that
    /// leaves no trace of forgotten text in the file (SQLite's VACUUM and
    /// FTS5's `secure-delete`): the text is still kept, in a segment.
    /// Returns the ids deleted.
    fn delete_moved(&self, moved: &[(String, u64)]) -> Result<Vec<String>>;
    /// Removes what deleted memories may have left in the store's files
    /// (SQLite: VACUUM when `vacuum_on_delete`); for a memory forgotten in
    /// the cold tier whose rows [`Rows::delete_moved`] removed earlier.
    fn scrub(&self) -> Result<()> {
        Ok(())
    }
    /// Active memories selected by `q`.
    fn query(&self, q: &Query) -> Result<Vec<Memory>>;
    /// Like [`Rows::query`], returning only what ranking reads.
    fn query_signals(&self, q: &Query) -> Result<Vec<Signals>>;
    /// Active memories by id, in the order asked; missing ids are skipped.
    fn get_many(&self, ids: &[String]) -> Result<Vec<Memory>>;
    /// How many active memories `q` selects (ignoring limit and offset).
    fn count(&self, q: &Query) -> Result<u64>;
    /// [`Rows::count`] per kind, kinds by name (only those present).
    fn count_by_kind(&self, q: &Query) -> Result<std::collections::BTreeMap<String, u64>>;
    /// Scopes in use, with counts, sorted by scope.
    fn list_scopes(&self) -> Result<Vec<ScopeCount>>;
    /// Store-wide figures.
    fn stats(&self) -> Result<StoreStats>;
    /// Records that reads returned these memories: each access adds its
    /// count and moves `last_accessed_at` forward to its time (never back).
    /// Ids no longer active are skipped.
    fn touch(&self, accesses: &[Access]) -> Result<()>;
    /// Moves active memories to the archive; returns how many moved.
    fn archive(&self, ids: &[String], reason: &str, at: Timestamp) -> Result<usize>;
    /// Archived memories selected by `q` (expiry is ignored), newest first.
    fn query_archived(&self, q: &Query) -> Result<Vec<Archived>>;
    /// Moves archived memories back; fails with `DuplicateId`-like conflicts
    /// if a restored (scope, key) is active again. Returns how many moved.
    fn restore(&self, ids: &[String]) -> Result<usize>;
    /// Earlier versions of a memory, oldest first.
    fn history(&self, id: &str) -> Result<Vec<Memory>>;
    /// Adds a history entry (used by import to stay lossless).
    fn put_history(&self, m: &Memory) -> Result<()>;
}

/// Sessions: size-bounded groups of memories.
pub trait Sessions {
    /// Creates a session; `DuplicateSession` if it exists.
    fn create_session(&self, s: &Session) -> Result<()>;
    /// Deletes a session that holds nothing (no memories, active or
    /// archived, and not archived itself); true if it was removed. Used to
    /// undo a session a failed write created.
    fn remove_empty_session(&self, id: &str) -> Result<bool>;
    /// A session by id.
    fn get_session(&self, id: &str) -> Result<Option<Session>>;
    /// Every session, oldest first.
    fn list_sessions(&self) -> Result<Vec<Session>>;
    /// Marks the session archived and moves its active memories to the
    /// archive (reason `session_archived`).
    fn archive_session(&self, id: &str, at: Timestamp) -> Result<Session>;
}

/// Full-text search within a view. The ranking (BM25) is shared by every
/// backend: each one feeds the same pipeline its postings and statistics.
pub trait TextSearch: Rows {
    /// Active memories selected by `q` that match any of `terms`, best
    /// relevance first (BM25: positive, higher is better),
    /// at most `limit`; only what ranking reads.
    fn search_signals(
        &self,
        q: &Query,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(Signals, f64)>>;
    /// Like [`TextSearch::search_signals`], with whole memories.
    fn search_text(&self, q: &Query, terms: &[String], limit: usize) -> Result<Vec<(Memory, f64)>> {
        let hits = self.search_signals(q, terms, limit)?;
        let ids: Vec<String> = hits.iter().map(|(s, _)| s.id.clone()).collect();
        let mut by_id: std::collections::HashMap<String, Memory> = self
            .get_many(&ids)?
            .into_iter()
            .map(|m| (m.id.clone(), m))
            .collect();
        Ok(hits
            .into_iter()
            .filter_map(|(s, score)| by_id.remove(&s.id).map(|m| (m, score)))
            .collect())
    }
}

/// Vectors: those waiting to be computed, storing them (one length per
/// model), and exact or indexed nearest-neighbour search within a view.
pub trait VectorSearch {
    /// Up to `limit` active memories without a vector of `model` (none, or
    /// another model's), oldest first; only those of `ids` when given. A
    /// store many nodes share (PostgreSQL) claims what it returns, for two
    /// minutes or until the memory changes or gets its vector, so another
    /// node's call skips it and no memory is embedded twice.
    fn pending_vectors(
        &self,
        model: &str,
        ids: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<PendingVector>>;
    /// How many active memories have a vector of `model` and how many wait
    /// for one, counted in one snapshot (the two always add up to the
    /// active memories of that moment).
    fn vector_counts(&self, model: &str) -> Result<VectorCounts>;
    /// Stores vectors of `model` (length `dim`) for memories whose checksum
    /// is still the given one (a memory updated meanwhile keeps waiting);
    /// returns how many were stored. A model's first vectors fix its
    /// dimension: a vector of another length is an error and stores nothing.
    fn set_vectors(
        &self,
        model: &str,
        dim: usize,
        items: &[(String, String, Vec<f32>)],
    ) -> Result<usize>;
    /// The `limit` active memories selected by `q` whose `model` vectors are
    /// most similar (dot product of normalised vectors) to `query`, best
    /// first, with only what ranking reads.
    fn search_vectors(
        &self,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(Signals, f32)>>;
    /// Drops every vector that is not of `keep` (all of them for `None`);
    /// returns how many memories lost theirs.
    fn clear_vectors(&self, keep: Option<&str>) -> Result<u64>;
    /// Vector models in the store with their dimension and vector count.
    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>>;
}

/// Assembled context packages, kept for replay.
pub trait ContextLog {
    /// Records an assembled context package for replay. `doc` holds ids and
    /// versions, never memory content (so `forget` leaves nothing here). A
    /// package id that is already logged keeps its first record.
    fn log_context(&self, id: &str, at: Timestamp, doc: &str) -> Result<()>;
    /// A logged context package by id.
    fn context_log(&self, id: &str) -> Result<Option<String>>;
    /// Every logged package as `(id, logged at, doc)`, by id (copying a
    /// store to another backend carries them).
    fn context_logs(&self) -> Result<Vec<(String, Timestamp, String)>>;
}

/// The audit trail (`crate::audit`): a hash chain of entries appended one
/// at a time across every process sharing the store, queried, checked and
/// cut from its oldest end.
pub trait AuditLog {
    /// Appends `ev` as the entry after the chain's head, at `at`: reads the
    /// head, seals the entry ([`AuditEntry::seal`]), stores it and moves
    /// the head, all while holding what serializes appends (SQLite's write
    /// transaction, a row lock on PostgreSQL's chain head), so two
    /// processes never take one sequence number.
    fn audit_append(&self, ev: &AuditEvent, at: Timestamp) -> Result<AuditEntry>;
    /// Entries `q` selects, newest first, at most `q.limit`.
    fn audit_query(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>>;
    /// Entries numbered above `after`, oldest first, at most `limit`.
    fn audit_range(&self, after: u64, limit: usize) -> Result<Vec<AuditEntry>>;
    /// The chain's anchor and head.
    fn audit_chain(&self) -> Result<AuditChain>;
    /// Removes the entries numbered up to `through` (those recorded before
    /// `cutoff`, when given, and those beyond the newest `max_entries`;
    /// `audit::prune_through`) in one transaction, recording the
    /// last removed entry's hash as the chain's anchor.
    fn audit_prune(
        &self,
        cutoff: Option<Timestamp>,
        max_entries: Option<u64>,
    ) -> Result<AuditPrune>;
    /// Stores `entries` exactly as given (hashes included) and sets the
    /// chain's anchor and head to `chain`, in one transaction: copying a
    /// store's trail into one that holds none (`strata migrate`), a chunk
    /// at a time.
    fn audit_restore(&self, chain: &AuditChain, entries: &[AuditEntry]) -> Result<()>;
}

/// The storage backend interface: every capability a backend implements,
/// each with its conformance tests (`tests/it/conformance.rs`), run by
/// both stores.
pub trait Store:
    Rows + Sessions + TextSearch + VectorSearch + ContextLog + AuditLog + Send + Sync + std::fmt::Debug
{
    /// Whether reads (queries, searches, gets; vector searches too when
    /// `with_vectors`) only compute: no network round trip, no wait on a
    /// lock another process holds or one held for long (an index being
    /// loaded). Unless a store says so, they may wait.
    fn reads_never_wait(&self, with_vectors: bool) -> bool {
        let _ = with_vectors;
        false
    }

    /// Whether writes inside [`without_waiting`] refuse to wait for other
    /// writers (and so may run where blocking is not allowed). Unless a
    /// store says so, its writes ignore the request and may wait.
    fn writes_can_hurry(&self) -> bool {
        false
    }

    /// Takes the lease `name` for `holder` until `until`, or extends it when
    /// `holder` has it already; `false`, and nothing changed, while another
    /// holder's lease runs past `now`. Upkeep and eviction run under leases,
    /// so processes sharing a store (serve nodes on one PostgreSQL, a CLI
    /// beside a server on one file) never run them twice at once; a holder
    /// that dies leaves a lease that simply runs out.
    fn take_lease(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool>;

    /// Ends `holder`'s lease `name`; another holder's lease stays.
    fn end_lease(&self, name: &str, holder: &str) -> Result<()>;
}

/// How an import treats what the store already holds.
#[derive(Clone, Debug, Default)]
pub struct ImportRules {
    /// What to do with an id the caller already holds.
    pub on_conflict: OnConflict,
    /// What the caller may touch.
    pub fence: Fence,
    /// The bound of a session the import creates.
    pub session_max_bytes: u64,
}

/// What an import does with one line's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdPlan {
    /// The id is free: store the line under it.
    New,
    /// The id is the caller's and taken: keep what is stored.
    Skip,
    /// The id is the caller's and taken: delete what is stored, then store
    /// the line.
    Replace,
    /// The id is taken outside the caller's fence. To this caller it is an
    /// id that does not exist, so the line is stored under a fresh id
    /// ([`rekeyed`]): the other memory is neither changed nor revealed
    /// (`error` and `skip` would say that it exists).
    Rekey,
}

/// Decides what an import does with `item`'s id, given the scope of the
/// memory (active or archived) the store holds under that id, if any.
pub fn plan_import_id(
    item: &ImportItem,
    held: Option<&Scope>,
    on_conflict: OnConflict,
    fence: &Fence,
) -> Result<IdPlan> {
    match held {
        None => Ok(IdPlan::New),
        Some(s) if !fence.contains(s) => Ok(IdPlan::Rekey),
        Some(_) => match on_conflict {
            OnConflict::Error => Err(Error::DuplicateId(item.memory.id.clone())),
            OnConflict::Skip => Ok(IdPlan::Skip),
            OnConflict::Replace => Ok(IdPlan::Replace),
        },
    }
}

/// Whether session `id` (holding `used` of its `bound` bytes, archived or
/// not) may change by `delta` bytes: growing needs an open session with
/// room; shrinking is always allowed. Every store checks a session so.
pub fn check_session_delta(
    id: &str,
    used: u64,
    bound: u64,
    archived: bool,
    delta: i64,
) -> Result<()> {
    if delta > 0 {
        if archived {
            return Err(Error::SessionArchived(id.into()));
        }
        if used + delta as u64 > bound {
            return Err(Error::SessionFull {
                session: id.into(),
                used,
                adding: delta as u64,
                bound,
            });
        }
    }
    Ok(())
}

/// A write under the `(scope, key)` of `old`: `new` takes its id, creation
/// time and access statistics, one version up (every store supersedes so).
pub fn superseding(old: &Memory, mut new: Memory) -> Memory {
    new.id = old.id.clone();
    new.created_at = old.created_at;
    new.version = old.version + 1;
    new.access_count = old.access_count;
    new.last_accessed_at = old.last_accessed_at;
    new
}

/// The session byte changes of replacing `old` by `new` as
/// `(session, delta, activity time)`, the growing side first: it is the
/// only one that can fail, so a failure leaves nothing changed.
pub fn session_deltas<'a>(
    old: &'a Memory,
    new: &'a Memory,
) -> Vec<(Option<&'a str>, i64, Option<Timestamp>)> {
    if old.session == new.session {
        let delta = new.size_bytes() as i64 - old.size_bytes() as i64;
        vec![(new.session.as_deref(), delta, Some(new.updated_at))]
    } else {
        vec![
            (
                new.session.as_deref(),
                new.size_bytes() as i64,
                Some(new.updated_at),
            ),
            (old.session.as_deref(), -(old.size_bytes() as i64), None),
        ]
    }
}

/// `item` under a fresh id, its history with it.
pub fn rekeyed(item: &ImportItem) -> ImportItem {
    let id = uuid::Uuid::now_v7().to_string();
    let mut out = item.clone();
    out.memory.id.clone_from(&id);
    for h in &mut out.history {
        h.id.clone_from(&id);
    }
    out
}

/// Checks an import line against the caller's fence and its session, and
/// returns the session to create when the line names one the store does not
/// hold (`held` is the stored session, if any).
///
/// Inside a limited fence a line is a write like any other: its scope (and
/// its history's) must lie inside the fence; its session must too, must not
/// be archived when the line is active, and must cover the line's scope; a
/// session the import creates takes the line's scope. The byte bound is the
/// store's to check, as for [`Rows::put`]. Without a fence (the local user
/// restoring an export) lines are stored as exported, and a missing session
/// is created as `session/<id>`.
pub fn import_session(
    item: &ImportItem,
    held: Option<&Session>,
    rules: &ImportRules,
) -> Result<Option<Session>> {
    let (fence, default_max_bytes) = (&rules.fence, rules.session_max_bytes);
    let m = &item.memory;
    let bad = |reason: String| Error::InvalidImport {
        line: item.line,
        reason,
    };
    if !fence.is_everything() {
        for s in std::iter::once(&m.scope).chain(item.history.iter().map(|h| &h.scope)) {
            if !fence.contains(s) {
                return Err(bad(format!("scope `{s}` is outside the caller's scopes")));
            }
        }
    }
    let Some(id) = m.session.as_deref() else {
        return Ok(None);
    };
    if fence.is_everything() {
        return Ok(held.is_none().then(|| Session {
            id: id.to_string(),
            scope: Scope::parse(&format!("session/{id}")).unwrap_or_else(|_| m.scope.clone()),
            created_at: m.created_at,
            last_activity_at: m.updated_at,
            archived_at: None,
            max_bytes: default_max_bytes,
            bytes: 0,
            ephemeral: false,
        }));
    }
    match held {
        Some(s) if !fence.contains(&s.scope) => Err(bad(format!(
            "session `{id}` is outside the caller's scopes"
        ))),
        Some(s) if !m.scope.is_within(&s.scope) => Err(bad(format!(
            "scope `{}` is outside the scope `{}` of session `{id}`",
            m.scope, s.scope
        ))),
        Some(s) if s.archived_at.is_some() && item.archived.is_none() => {
            Err(Error::SessionArchived(id.into()))
        }
        Some(_) => Ok(None),
        None => Ok(Some(Session {
            id: id.to_string(),
            scope: m.scope.clone(),
            created_at: m.created_at,
            last_activity_at: m.updated_at,
            archived_at: None,
            max_bytes: default_max_bytes,
            bytes: 0,
            ephemeral: false,
        })),
    }
}
