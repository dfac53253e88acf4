//! The engine: validated writes, scoped reads, ranking, lifetime tiers,
//! sessions, forgetting, promotion and the seeds' typed operations.
//!
//! Every public operation is a plain synchronous call over a [`Store`]; the
//! engine holds no global state. Front ends (CLI, HTTP, MCP) call these and
//! nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Result;
use crate::config::{Config, StoreConfig};
use crate::embed::Embedder;
use crate::error::Error;
use crate::filter::Filter;
use crate::model::{self, Kind, Memory, NewMemory, Provenance, Role, Source};
use crate::rank::{self, Relevance, ScoreParts, Signals, Strategy};
use crate::scope::{Fence, Scope, Tier, View};
use crate::store::{
    Archived, MemoryStore, Order, Put, Query, ScopeCount, Session, SqliteStore, Store, StoreStats,
};
use crate::text;
use crate::tokens::TokenCounter;

mod access;
mod vectors;
pub use self::vectors::{EmbedStatus, EmbedWorker, QueryVector};

/// An explicit answer to "are you sure?" for high-risk operations (writing a
/// global preference, clearing global memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Confirm {
    /// Not confirmed: high-risk operations fail with `NeedsConfirmation`.
    #[default]
    No,
    /// Confirmed.
    Yes,
}

/// A recall request.
#[derive(Clone, Debug)]
pub struct Recall {
    /// Natural-language or keyword query; may be empty.
    pub query: String,
    /// Scopes that may be seen.
    pub view: View,
    /// Conditions.
    pub filter: Filter,
    /// Ranking; `None` uses the configured default (hybrid).
    pub strategy: Option<Strategy>,
    /// Most results.
    pub limit: usize,
    /// Return score parts.
    pub explain: bool,
    /// Record the access (count and time) on returned memories.
    pub touch: bool,
    /// Search the archive too.
    pub include_archived: bool,
}

impl Recall {
    /// A recall of `query` over `view` with the defaults: hybrid, 10 results,
    /// access recorded.
    pub fn new(query: impl Into<String>, view: View) -> Recall {
        Recall {
            query: query.into(),
            view,
            filter: Filter::all(),
            strategy: None,
            limit: 10,
            explain: false,
            touch: true,
            include_archived: false,
        }
    }
}

/// One recall result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Recalled {
    /// The memory.
    #[serde(flatten)]
    pub memory: Memory,
    /// The score it was ranked by.
    pub score: f64,
    /// Score parts, under `explain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<ScoreParts>,
    /// Set when the memory came from the archive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived: Option<ArchiveMark>,
}

/// When and why a memory was archived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArchiveMark {
    /// When.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// Why.
    pub reason: String,
}

/// Order of [`Engine::list`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Newest first.
    #[default]
    Recency,
    /// Oldest first.
    Oldest,
    /// Highest effective importance first.
    Importance,
}

impl std::str::FromStr for ListOrder {
    type Err = Error;
    fn from_str(s: &str) -> Result<ListOrder> {
        match s {
            "recency" | "newest" => Ok(ListOrder::Recency),
            "oldest" => Ok(ListOrder::Oldest),
            "importance" => Ok(ListOrder::Importance),
            _ => Err(Error::field(
                "order",
                format!("`{s}` is not one of recency, oldest, importance"),
            )),
        }
    }
}

/// A list request: memories in a view, filtered and ordered, no query.
#[derive(Clone, Debug)]
pub struct List {
    /// Scopes that may be seen.
    pub view: View,
    /// Conditions.
    pub filter: Filter,
    /// Order.
    pub order: ListOrder,
    /// Most results.
    pub limit: usize,
    /// Skip this many.
    pub offset: usize,
}

impl List {
    /// Newest 50 in `view`.
    pub fn new(view: View) -> List {
        List {
            view,
            filter: Filter::all(),
            order: ListOrder::Recency,
            limit: 50,
            offset: 0,
        }
    }
}

/// What to forget.
#[derive(Clone, Debug)]
pub enum Forget {
    /// One memory by id (pinned or not).
    Id(String),
    /// Exactly these memories (pinned or not), e.g. the ids a dry run
    /// reported and a person confirmed; ids that no longer exist are skipped.
    Ids(Vec<String>),
    /// Everything in a view matching a filter.
    Filter {
        /// Scopes.
        view: View,
        /// Conditions.
        filter: Filter,
    },
    /// Every memory of a session; the session is then archived (no more writes).
    Session(String),
    /// A scope and everything below it.
    Scope(Scope),
    /// Everything created before a time, in a view (every scope when `None`).
    Before {
        /// The cut-off (exclusive).
        before: Timestamp,
        /// Scopes, or all.
        view: Option<View>,
    },
}

/// Options of [`Engine::forget`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ForgetOptions {
    /// Needed when the selection reaches global memory.
    pub confirm: Confirm,
    /// Delete pinned memories too.
    pub force: bool,
    /// Report what would be deleted without deleting.
    pub dry_run: bool,
}

/// What [`Engine::forget`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForgetReport {
    /// Memories deleted (active and archived).
    pub deleted: usize,
    /// Pinned memories that matched and were kept.
    pub pinned_kept: usize,
    /// Ids deleted (or that would be, under dry run).
    pub ids: Vec<String>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Which task memories survive [`Engine::complete_task`].
#[derive(Clone, Debug, Default)]
pub struct Promotion {
    /// These ids (each must be in the task).
    pub ids: Vec<String>,
    /// And every memory at or above this importance.
    pub min_importance: Option<f64>,
}

/// What [`Engine::complete_task`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskReport {
    /// The task scope that was cleared.
    pub task: String,
    /// The project scope promoted into.
    pub project: String,
    /// (old id, new id) of each promoted memory.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Vec<String>>))]
    pub promoted: Vec<(String, String)>,
    /// Task memories moved to the archive (reason `task_completed`).
    pub archived: usize,
}

/// A session's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Manifest {
    /// The session record.
    #[serde(flatten)]
    pub session: Session,
    /// Active memories.
    pub memories: u64,
    /// Archived memories.
    pub archived: u64,
    /// Active memories per kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Active memories per role.
    pub by_role: BTreeMap<String, u64>,
    /// Sum of tokens of active memories.
    pub tokens: u64,
    /// Earliest memory.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub first_activity_at: Option<Timestamp>,
    /// Latest write.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub last_activity_at: Option<Timestamp>,
}

/// Changes for [`Engine::update`]; unset fields keep their value.
#[derive(Clone, Debug, Default)]
pub struct Patch {
    /// New content.
    pub content: Option<String>,
    /// New payload (`Some(None)` clears it).
    pub payload: Option<Option<serde_json::Value>>,
    /// New tags.
    pub tags: Option<Vec<String>>,
    /// New importance.
    pub importance: Option<f64>,
    /// New kind.
    pub kind: Option<Kind>,
    /// New key (`Some(None)` clears it).
    pub key: Option<Option<String>>,
    /// Pin or unpin.
    pub pinned: Option<bool>,
    /// Mark or unmark sensitive.
    pub sensitive: Option<bool>,
    /// New expiry (`Some(None)` clears it).
    pub expires_at: Option<Option<Timestamp>>,
}

/// What [`Engine::upkeep`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpkeepReport {
    /// Expired memories moved to the archive.
    pub expired: usize,
    /// Memories evicted to the archive over `max_items`.
    pub evicted: usize,
}

type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// A memory of `scope` may not join session `id`, which covers `covers`.
fn beside_session(id: &str, covers: &Scope, scope: &Scope) -> Error {
    Error::field(
        "session",
        format!(
            "session `{id}` holds memories of `{covers}`; `{scope}` is outside it \
             (write the memory without the session, or into a session \
             created with a scope that covers it)"
        ),
    )
}

/// The memory engine.
pub struct Engine {
    store: Arc<dyn Store>,
    pub(crate) cfg: Config,
    tokens: TokenCounter,
    clock: Clock,
    counts: crate::context::render::CountCache,
    pub(crate) embedder: OnceLock<std::result::Result<Option<Arc<dyn Embedder>>, String>>,
    embed_signal: vectors::Signal,
    query_cache: vectors::QueryCache,
    access: Arc<access::AccessLog>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.close_access_log();
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Engine {
    /// Opens the engine a configuration describes.
    pub fn open(cfg: Config) -> Result<Engine> {
        cfg.validate()?;
        let store: Box<dyn Store> = match &cfg.store {
            StoreConfig::Sqlite { path, options } => {
                Box::new(SqliteStore::open(path, options.clone())?)
            }
            StoreConfig::Memory => Box::new(MemoryStore::new()),
        };
        Engine::with_store(cfg, store)
    }

    /// An engine over an already opened store.
    pub fn with_store(cfg: Config, store: Box<dyn Store>) -> Result<Engine> {
        cfg.validate()?;
        let tokens = TokenCounter::new(&cfg.tokenizer)?;
        Ok(Engine {
            store: Arc::from(store),
            cfg,
            tokens,
            clock: Arc::new(Timestamp::now),
            counts: Default::default(),
            embedder: OnceLock::new(),
            embed_signal: Default::default(),
            query_cache: Default::default(),
            access: Default::default(),
        })
    }

    /// Replaces the clock (tests of decay and expiry).
    pub fn set_clock(&mut self, clock: impl Fn() -> Timestamp + Send + Sync + 'static) {
        self.clock = Arc::new(clock);
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The store.
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// Remembered token counts of rendered context pieces.
    pub(crate) fn count_cache(&self) -> &crate::context::render::CountCache {
        &self.counts
    }

    /// The tokenizer that counts memories (and context budgets).
    pub fn token_counter(&self) -> &TokenCounter {
        &self.tokens
    }

    pub(crate) fn now(&self) -> Timestamp {
        model::ms((self.clock)())
    }

    /// Checks every field of a new memory without building it.
    fn check_new(&self, new: &NewMemory) -> Result<()> {
        if new.scope.is_none() {
            return Err(Error::field("scope", "missing"));
        }
        model::validate_content(&new.content)?;
        let size = new.content.len() + new.payload.as_ref().map_or(0, |p| p.to_string().len());
        if size > self.cfg.max_item_bytes {
            return Err(Error::ItemTooLarge {
                size,
                limit: self.cfg.max_item_bytes,
            });
        }
        let kind = new.kind.clone().unwrap_or(Kind::Context);
        model::validate_importance(new.importance.unwrap_or_else(|| kind.default_importance()))?;
        model::validate_tags(&new.tags)?;
        if let Some(k) = &new.key {
            model::validate_key(k)?;
        }
        if let Some(p) = &new.payload {
            model::validate_payload(p)?;
        }
        if let Some(s) = &new.session {
            model::validate_session_id(s)?;
        }
        if new.ttl.is_some_and(|d| !d.is_positive()) {
            return Err(Error::field("ttl", "must be positive"));
        }
        if let Some(at) = new.created_at
            && at > self.now()
        {
            return Err(Error::field("created_at", format!("{at} is in the future")));
        }
        Ok(())
    }

    /// Validates a new memory and fills in everything the engine assigns.
    fn build(&self, new: NewMemory, now: Timestamp) -> Result<Memory> {
        self.check_new(&new)?;
        self.build_checked(new, now)
    }

    /// [`Engine::build`] for a memory `check_new` already accepted.
    fn build_checked(&self, new: NewMemory, now: Timestamp) -> Result<Memory> {
        let scope = new.scope.ok_or_else(|| Error::field("scope", "missing"))?;
        let kind = new.kind.unwrap_or(Kind::Context);
        let importance = new.importance.unwrap_or_else(|| kind.default_importance());
        let mut tags: Vec<String> = Vec::with_capacity(new.tags.len());
        for t in new.tags {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let expires_at = match new.ttl {
            Some(d) => Some(now.checked_add(d).map_err(|e| Error::field("ttl", e))?),
            None => None,
        };
        let source = new.source.unwrap_or(if kind == Kind::Conversation {
            Source::Conversation
        } else {
            Source::External
        });
        let checksum = model::checksum(&new.content, new.payload.as_ref());
        let tokens = self.tokens.count(&new.content);
        let created_at = new.created_at.map_or(now, model::ms);
        Ok(Memory {
            id: uuid::Uuid::now_v7().to_string(),
            scope,
            kind,
            role: new.role,
            content: new.content,
            payload: new.payload,
            key: new.key,
            tags,
            importance,
            source,
            session: new.session,
            created_at,
            updated_at: created_at,
            last_accessed_at: None,
            access_count: 0,
            expires_at,
            pinned: new.pinned,
            sensitive: new.sensitive,
            tokens,
            checksum,
            version: 1,
            embedding: None,
            provenance: new.provenance,
        })
    }

    fn check_confirm(&self, m: &NewMemory, confirm: Confirm) -> Result<()> {
        let global = m.scope.as_ref().is_some_and(|s| s.tier() == Tier::Global);
        if global && m.kind == Some(Kind::Preference) && confirm != Confirm::Yes {
            return Err(Error::NeedsConfirmation(format!(
                "adding a preference to global memory (`{}`)",
                m.scope.as_ref().map(|s| s.to_string()).unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// Creates the session with the configured defaults and `scope` unless
    /// it exists; true when this call created it. A write creates its
    /// session in its own scope, so the session covers what it holds.
    fn ensure_session(&self, id: &str, scope: &Scope, now: Timestamp) -> Result<bool> {
        if self.store.get_session(id)?.is_some() {
            return Ok(false);
        }
        let s = Session {
            id: id.into(),
            scope: scope.clone(),
            created_at: now,
            last_activity_at: now,
            archived_at: None,
            max_bytes: self.cfg.session_max_bytes,
            bytes: 0,
        };
        match self.store.create_session(&s) {
            Ok(()) => Ok(true),
            // Another writer created it first.
            Err(Error::DuplicateSession(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A session holds only memories inside its scope: one whose scope
    /// covers `project/acme` may take a memory of `project/acme/sprint/s1`,
    /// never one of `project/beta`. Reading or archiving a session then
    /// touches nothing outside the scope it was created for.
    fn check_joins(&self, m: &Memory) -> Result<()> {
        let Some(id) = &m.session else {
            return Ok(());
        };
        match self.store.get_session(id)? {
            Some(s) if !m.scope.is_within(&s.scope) => Err(beside_session(id, &s.scope, &m.scope)),
            _ => Ok(()),
        }
    }

    /// Stores a memory. A global preference needs [`Engine::remember_with`]
    /// and `Confirm::Yes`.
    pub fn remember(&self, new: NewMemory) -> Result<Memory> {
        self.remember_with(new, Confirm::No)
    }

    /// Stores a memory, with an explicit confirmation for high-risk writes.
    pub fn remember_with(&self, new: NewMemory, confirm: Confirm) -> Result<Memory> {
        self.check_confirm(&new, confirm)?;
        self.check_new(&new)?;
        let now = self.now();
        let m = self.build(new, now)?;
        let created = match &m.session {
            Some(s) => self.ensure_session(s, &m.scope, now)?,
            None => false,
        };
        let mut put = self.check_joins(&m).and_then(|()| self.store.put(&m));
        if let (Err(Error::SessionNotFound(s)), false) = (&put, created) {
            // Another writer's failed write removed the session it had just
            // created, between our check and our put: create it and retry.
            let s = s.clone();
            self.ensure_session(&s, &m.scope, now)?;
            put = self.check_joins(&m).and_then(|()| self.store.put(&m));
        }
        let stored = match put {
            Ok(p) => p.into_memory(),
            Err(e) => {
                // A failed write leaves no session behind that it created.
                // Cleanup is best effort: the write's own error is the answer.
                if let (true, Some(s)) = (created, &m.session) {
                    let _ = self.store.remove_empty_session(s);
                }
                return Err(e);
            }
        };
        if let Some(root) = stored.scope.project_root() {
            self.enforce_bound(&root)?;
        }
        self.wake_embedder();
        Ok(stored)
    }

    /// Stores many memories in one transaction: all or none. Token counting
    /// runs on the other cores while earlier memories are written.
    pub fn remember_batch(&self, items: Vec<NewMemory>, confirm: Confirm) -> Result<Vec<Memory>> {
        for (i, n) in items.iter().enumerate() {
            self.check_confirm(n, confirm)
                .map_err(|e| prefix_item(i, e))?;
            self.check_new(n).map_err(|e| prefix_item(i, e))?;
        }
        let now = self.now();
        // Each session a batch creates takes the scope of its first item.
        let mut sessions = BTreeMap::new();
        for n in &items {
            if let (Some(s), Some(scope)) = (&n.session, &n.scope) {
                sessions.entry(s.clone()).or_insert_with(|| scope.clone());
            }
        }
        let held: BTreeMap<String, Scope> = sessions
            .keys()
            .map(|s| Ok((s.clone(), self.store.get_session(s)?)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter_map(|(id, s)| s.map(|s| (id, s.scope)))
            .collect();
        for (i, n) in items.iter().enumerate() {
            if let (Some(s), Some(scope)) = (&n.session, &n.scope) {
                let covers = held.get(s).unwrap_or(&sessions[s]);
                if !scope.is_within(covers) {
                    return Err(prefix_item(i, beside_session(s, covers, scope)));
                }
            }
        }
        let mut created = Vec::new();
        for (s, scope) in &sessions {
            match self.ensure_session(s, scope, now) {
                Ok(true) => created.push(s.clone()),
                Ok(false) => {}
                Err(e) => {
                    for c in &created {
                        let _ = self.store.remove_empty_session(c);
                    }
                    return Err(e);
                }
            }
        }
        let stored = match self.pipelined_put(items, now) {
            Ok(v) => v,
            Err(e) => {
                for s in &created {
                    let _ = self.store.remove_empty_session(s);
                }
                return Err(e);
            }
        };
        let roots: BTreeSet<Scope> = stored
            .iter()
            .filter_map(|m| m.scope.project_root())
            .collect();
        for r in roots {
            self.enforce_bound(&r)?;
        }
        self.wake_embedder();
        Ok(stored)
    }

    /// Builds memories in chunks on helper threads and feeds them to one
    /// store transaction as they are ready (PERF-NOTES: token counting costs
    /// about as much as the insert itself, so the two overlap).
    fn pipelined_put(&self, items: Vec<NewMemory>, now: Timestamp) -> Result<Vec<Memory>> {
        const CHUNK: usize = 512;
        if items.len() <= CHUNK {
            let mut it = items
                .into_iter()
                .enumerate()
                .map(|(i, n)| self.build_checked(n, now).map_err(|e| prefix_item(i, e)));
            return Ok(self
                .store
                .put_batch(&mut it)?
                .into_iter()
                .map(Put::into_memory)
                .collect());
        }
        // One core writes; the others prepare.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .saturating_sub(1)
            .clamp(1, 4);
        let mut chunks: Vec<Vec<(usize, NewMemory)>> = Vec::new();
        for (i, n) in items.into_iter().enumerate() {
            if i % CHUNK == 0 {
                chunks.push(Vec::with_capacity(CHUNK));
            }
            chunks.last_mut().unwrap().push((i, n));
        }
        let n_chunks = chunks.len();
        std::thread::scope(|s| {
            // Chunk k goes to worker k % workers; the writer takes chunks in
            // order, so results keep the input order.
            let mut rxs = Vec::new();
            let mut per_worker: Vec<Vec<Vec<(usize, NewMemory)>>> =
                (0..workers).map(|_| Vec::new()).collect();
            for (k, c) in chunks.into_iter().enumerate() {
                per_worker[k % workers].push(c);
            }
            for work in per_worker {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Result<Memory>>>(2);
                rxs.push(rx);
                s.spawn(move || {
                    for c in work {
                        let built: Vec<Result<Memory>> = c
                            .into_iter()
                            .map(|(i, n)| self.build_checked(n, now).map_err(|e| prefix_item(i, e)))
                            .collect();
                        if tx.send(built).is_err() {
                            return;
                        }
                    }
                });
            }
            let mut feed = (0..n_chunks).flat_map(|k| {
                rxs[k % workers].recv().unwrap_or_else(|_| {
                    vec![Err(Error::field("batch", "a preparing thread stopped"))]
                })
            });
            let out = self.store.put_batch(&mut feed);
            drop(feed);
            drop(rxs);
            out.map(|v| v.into_iter().map(Put::into_memory).collect())
        })
    }

    /// Moves the lowest-value memories of a project to the archive when it
    /// holds more than `max_items`: lowest effective importance first, then
    /// oldest, never pinned; `evict_fraction` of the bound (at least the
    /// excess) at a time, so eviction does not run on every write.
    fn enforce_bound(&self, root: &Scope) -> Result<usize> {
        if self.cfg.max_items == 0 {
            return Ok(0);
        }
        let now = self.now();
        let view = View::subtree(root.clone());
        let count = self
            .store
            .count(&Query::view(view.clone(), now).include_expired(true))?;
        if count <= self.cfg.max_items {
            return Ok(0);
        }
        let excess = count - self.cfg.max_items;
        let batch = ((self.cfg.max_items as f64) * self.cfg.evict_fraction).ceil() as u64;
        let n = excess.max(batch) as usize;
        let unpinned = Filter::parse(&json!({"pinned": false}))?;
        let mut cands: Vec<(Signals, f64)> = self
            .store
            .query_signals(
                &Query::view(view, now)
                    .filter(unpinned)
                    .include_expired(true),
            )?
            .into_iter()
            .map(|m| {
                let e = rank::score(
                    &self.cfg.ranking,
                    Strategy::Importance,
                    &m,
                    &Relevance::default(),
                    now,
                )
                .effective_importance;
                (m, e)
            })
            .collect();
        cands.sort_by(|a, b| {
            a.1.partial_cmp(&b.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.0.created_at.cmp(&b.0.created_at))
                .then_with(|| a.0.id.cmp(&b.0.id))
        });
        let ids: Vec<String> = cands.into_iter().take(n).map(|(m, _)| m.id).collect();
        self.store.archive(&ids, "evicted", now)
    }

    /// An active memory by id.
    pub fn get(&self, id: &str) -> Result<Option<Memory>> {
        self.settle_accesses();
        self.store.get(id)
    }

    /// An archived memory by id.
    pub fn get_archived(&self, id: &str) -> Result<Option<Archived>> {
        let mut q = Query::everything(self.now());
        q.filter = Filter::parse(&json!({"id": id}))?;
        Ok(self.store.query_archived(&q)?.into_iter().next())
    }

    /// Earlier versions of a memory, oldest first.
    pub fn history(&self, id: &str) -> Result<Vec<Memory>> {
        self.store.history(id)
    }

    /// Changes a memory if its version is still `expected_version`.
    pub fn update(&self, id: &str, patch: Patch, expected_version: u64) -> Result<Memory> {
        let mut m = self
            .store
            .get(id)?
            .ok_or_else(|| Error::NotFound(id.into()))?;
        if m.version != expected_version {
            return Err(Error::VersionConflict {
                id: id.into(),
                expected: expected_version,
                current: m.version,
            });
        }
        let now = self.now();
        if let Some(c) = patch.content {
            model::validate_content(&c)?;
            m.tokens = self.tokens.count(&c);
            if c != m.content {
                // The old vector describes the old text.
                m.embedding = None;
            }
            m.content = c;
        }
        if let Some(p) = patch.payload {
            if let Some(p) = &p {
                model::validate_payload(p)?;
            }
            m.payload = p;
        }
        let size = m.content.len() + m.payload.as_ref().map_or(0, |p| p.to_string().len());
        if size > self.cfg.max_item_bytes {
            return Err(Error::ItemTooLarge {
                size,
                limit: self.cfg.max_item_bytes,
            });
        }
        if let Some(t) = patch.tags {
            model::validate_tags(&t)?;
            m.tags = t;
        }
        if let Some(x) = patch.importance {
            model::validate_importance(x)?;
            m.importance = x;
        }
        if let Some(k) = patch.kind {
            m.kind = k;
        }
        if let Some(k) = patch.key {
            if let Some(k) = &k {
                model::validate_key(k)?;
            }
            m.key = k;
        }
        if let Some(p) = patch.pinned {
            m.pinned = p;
        }
        if let Some(s) = patch.sensitive {
            m.sensitive = s;
        }
        if let Some(e) = patch.expires_at {
            m.expires_at = e;
        }
        m.checksum = model::checksum(&m.content, m.payload.as_ref());
        m.updated_at = now;
        let updated = self.store.update(&m, expected_version)?;
        self.wake_embedder();
        Ok(updated)
    }

    /// Ranked memories for a query within a view.
    ///
    /// Two phases: candidates are ranked on a few columns ([`Signals`]:
    /// bm25 from the full-text index, importance, kind, times, reads), then
    /// only the memories that made the cut are loaded.
    pub fn recall(&self, req: &Recall) -> Result<Vec<Recalled>> {
        req.view.check()?;
        let terms = text::query_terms(&req.query);
        text::check_query_terms(&terms)?;
        if req.limit == 0 {
            return Ok(Vec::new());
        }
        let now = self.now();
        let strategy = req.strategy.unwrap_or(self.cfg.ranking.strategy);
        let base = Query::view(req.view.clone(), now).filter(req.filter.clone());
        // Relevance and hybrid rank the best text matches; recency and
        // importance order every match by their own measure.
        let want = match strategy {
            Strategy::Relevance | Strategy::Hybrid => req
                .limit
                .saturating_mul(self.cfg.ranking.candidates_per_result)
                .max(100),
            Strategy::Recency | Strategy::Importance => usize::MAX,
        };
        // Vectors rank for relevance and hybrid (recency and importance
        // order by their own measure).
        let qvec = match strategy {
            Strategy::Relevance | Strategy::Hybrid => self.query_vector(&req.query)?,
            Strategy::Recency | Strategy::Importance => None,
        };
        let mut cands: Vec<(Signals, Relevance)> = if !terms.is_empty() || qvec.is_some() {
            self.relevant(&base, &terms, qvec.as_ref(), want)?
        } else if strategy == Strategy::Recency {
            self.store
                .query_signals(&base.limit(req.limit))?
                .into_iter()
                .map(|m| (m, Relevance::default()))
                .collect()
        } else {
            self.store
                .query_signals(&base)?
                .into_iter()
                .map(|m| (m, Relevance::default()))
                .collect()
        };
        // Archived memories, when asked for, compete in the same ranking
        // (one normalisation of relevance across both).
        let mut archived: BTreeMap<String, (Memory, ArchiveMark)> = BTreeMap::new();
        if req.include_archived {
            let found: Vec<(Memory, ArchiveMark)> = self
                .store
                .query_archived(&Query::view(req.view.clone(), now).filter(req.filter.clone()))?
                .into_iter()
                .map(|a| {
                    (
                        a.memory,
                        ArchiveMark {
                            at: a.archived_at,
                            reason: a.reason,
                        },
                    )
                })
                .collect();
            let scores: Vec<Option<f64>> = if terms.is_empty() {
                vec![None; found.len()]
            } else {
                let docs: Vec<(&str, f64)> = found
                    .iter()
                    .map(|(m, _)| (m.content.as_str(), m.tokens as f64))
                    .collect();
                text::bm25_docs(&docs, &terms)
                    .into_iter()
                    .map(Some)
                    .collect()
            };
            for ((m, mark), s) in found.into_iter().zip(scores) {
                if terms.is_empty() || s.is_some_and(|x| x > 0.0) {
                    cands.push((Signals::of(&m), Relevance::text(s)));
                    archived.insert(m.id.clone(), (m, mark));
                }
            }
        }
        let mut ranked: Vec<(Signals, ScoreParts, bool)> = self
            .rank(cands, strategy, now)
            .into_iter()
            .map(|(s, p)| {
                let arch = archived.contains_key(&s.id);
                (s, p, arch)
            })
            .collect();
        ranked.truncate(req.limit);
        let active_ids: Vec<String> = ranked
            .iter()
            .filter(|r| !r.2)
            .map(|r| r.0.id.clone())
            .collect();
        let mut loaded: BTreeMap<String, Memory> = self
            .store
            .get_many(&active_ids)?
            .into_iter()
            .map(|m| (m.id.clone(), m))
            .collect();
        let mut out = Vec::with_capacity(ranked.len());
        for (sig, parts, arch) in ranked {
            let found = if arch {
                archived.remove(&sig.id).map(|(m, mark)| (m, Some(mark)))
            } else {
                // None when forgotten between the two phases.
                loaded.remove(&sig.id).map(|m| (m, None))
            };
            let Some((mut memory, mark)) = found else {
                continue;
            };
            // A caller reads what was recalled; the vector is for ranking
            // (and stays in `get` and exports).
            memory.embedding = None;
            out.push(Recalled {
                score: parts.total,
                explain: req.explain.then_some(parts),
                memory,
                archived: mark,
            });
        }
        if req.touch {
            self.record_access(&active_ids, now)?;
        }
        Ok(out)
    }

    /// Scores and sorts candidates, best first.
    pub(crate) fn rank(
        &self,
        mut cands: Vec<(Signals, Relevance)>,
        strategy: Strategy,
        now: Timestamp,
    ) -> Vec<(Signals, ScoreParts)> {
        rank::fuse(&self.cfg.ranking, &mut cands);
        let mut scored: Vec<(Signals, ScoreParts)> = cands
            .into_iter()
            .map(|(m, r)| {
                let p = rank::score(&self.cfg.ranking, strategy, &m, &r, now);
                (m, p)
            })
            .collect();
        rank::sort_scored(&mut scored, |m| m.id.as_str());
        scored
    }

    /// Memories in a view, filtered and ordered (no query, no access recorded).
    pub fn list(&self, req: &List) -> Result<Vec<Memory>> {
        req.view.check()?;
        if req.offset > i64::MAX as usize {
            return Err(Error::field(
                "offset",
                format!("{} is over the largest offset, {}", req.offset, i64::MAX),
            ));
        }
        self.settle_accesses();
        let now = self.now();
        let mut q = Query::view(req.view.clone(), now).filter(req.filter.clone());
        match req.order {
            ListOrder::Recency | ListOrder::Oldest => {
                q.order = if req.order == ListOrder::Oldest {
                    Order::Oldest
                } else {
                    Order::Newest
                };
                q.limit = Some(req.limit);
                q.offset = req.offset;
                self.store.query(&q)
            }
            ListOrder::Importance => {
                let cands = self
                    .store
                    .query_signals(&q)?
                    .into_iter()
                    .map(|m| (m, Relevance::default()))
                    .collect();
                let ids: Vec<String> = self
                    .rank(cands, Strategy::Importance, now)
                    .into_iter()
                    .skip(req.offset)
                    .take(req.limit)
                    .map(|(s, _)| s.id)
                    .collect();
                self.store.get_many(&ids)
            }
        }
    }

    /// Archived memories in a view, newest first.
    pub fn list_archived(
        &self,
        view: &View,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Archived>> {
        self.store.query_archived(
            &Query::view(view.clone(), self.now())
                .filter(filter.clone())
                .limit(limit),
        )
    }

    /// Moves archived memories back into active memory.
    pub fn restore(&self, ids: &[String]) -> Result<usize> {
        self.store.restore(ids)
    }

    /// How many active memories a view and filter select.
    pub fn count(&self, view: &View, filter: &Filter) -> Result<u64> {
        self.store
            .count(&Query::view(view.clone(), self.now()).filter(filter.clone()))
    }

    /// Deletes memories everywhere (row, text index, archive, history).
    /// Pinned memories are kept by bulk selections unless `force`; anything
    /// reaching global memory needs `Confirm::Yes` unless it names one id.
    pub fn forget(&self, what: &Forget, opts: ForgetOptions) -> Result<ForgetReport> {
        let now = self.now();
        let (query, session): (Query, Option<&str>) = match what {
            Forget::Id(id) => {
                model::validate_id(id)?;
                if self.find_any(id)?.is_none() {
                    return Err(Error::NotFound(id.clone()));
                }
                return self.forget_named(vec![id.clone()], opts);
            }
            Forget::Ids(ids) => {
                for id in ids {
                    model::validate_id(id)?;
                }
                let mut global = false;
                for id in ids {
                    global |= self
                        .find_any(id)?
                        .is_some_and(|m| m.scope.tier() == Tier::Global);
                }
                if global && opts.confirm != Confirm::Yes && !opts.dry_run {
                    return Err(Error::NeedsConfirmation(
                        "forgetting global memories".into(),
                    ));
                }
                return self.forget_named(ids.clone(), opts);
            }
            Forget::Filter { view, filter } => {
                if view.is_empty() {
                    return Err(Error::field("view", "no scope named"));
                }
                (Query::view(view.clone(), now).filter(filter.clone()), None)
            }
            Forget::Session(s) => {
                model::validate_session_id(s)?;
                if self.store.get_session(s)?.is_none() {
                    return Err(Error::SessionNotFound(s.clone()));
                }
                (
                    Query::everything(now).filter(Filter::parse(&json!({"session": s}))?),
                    Some(s.as_str()),
                )
            }
            Forget::Scope(scope) => (Query::view(View::subtree(scope.clone()), now), None),
            Forget::Before { before, view } => {
                let f = Filter::parse(&json!({"created_at": {"$lt": before.as_millisecond()}}))?;
                match view {
                    Some(v) => (Query::view(v.clone(), now).filter(f), None),
                    None => (Query::everything(now).filter(f), None),
                }
            }
        };
        let query = query.include_expired(true);
        let reaches_global = match &query.view {
            Some(v) => v.touches_global(),
            None => true,
        };
        let mut selected: Vec<Memory> = self.store.query(&query)?;
        selected.extend(
            self.store
                .query_archived(&query)?
                .into_iter()
                .map(|a| a.memory),
        );
        let (pinned, rest): (Vec<Memory>, Vec<Memory>) =
            selected.into_iter().partition(|m| m.pinned);
        let mut doomed = rest;
        let pinned_kept = if opts.force {
            doomed.extend(pinned);
            0
        } else {
            pinned.len()
        };
        // A dry run only reports, so it needs no confirmation.
        if reaches_global && opts.confirm != Confirm::Yes && !opts.dry_run {
            let global = doomed
                .iter()
                .filter(|m| m.scope.tier() == Tier::Global)
                .count();
            if global > 0 {
                return Err(Error::NeedsConfirmation(format!(
                    "forgetting {global} global memories"
                )));
            }
        }
        let mut ids: Vec<String> = doomed.into_iter().map(|m| m.id).collect();
        ids.sort();
        ids.dedup();
        let deleted = if opts.dry_run {
            ids.len()
        } else {
            self.store.delete(&ids)?
        };
        if let (Some(s), false) = (session, opts.dry_run)
            && pinned_kept == 0
        {
            self.store.archive_session(s, now).ok();
        }
        Ok(ForgetReport {
            deleted,
            pinned_kept,
            ids,
            dry_run: opts.dry_run,
        })
    }

    /// An active or archived memory by id.
    fn find_any(&self, id: &str) -> Result<Option<Memory>> {
        match self.store.get(id)? {
            Some(m) => Ok(Some(m)),
            None => Ok(self.get_archived(id)?.map(|a| a.memory)),
        }
    }

    /// Deletes memories named by id (pinned or not), or only reports them.
    fn forget_named(&self, ids: Vec<String>, opts: ForgetOptions) -> Result<ForgetReport> {
        let deleted = if opts.dry_run {
            ids.len()
        } else {
            self.store.delete(&ids)?
        };
        Ok(ForgetReport {
            deleted,
            pinned_kept: 0,
            ids,
            dry_run: opts.dry_run,
        })
    }

    /// Copies a memory into another scope (new id, provenance kept); the
    /// original stays. A preference copied into global needs `Confirm::Yes`.
    pub fn promote(&self, id: &str, to: &Scope, confirm: Confirm) -> Result<Memory> {
        let m = self
            .store
            .get(id)?
            .ok_or_else(|| Error::NotFound(id.into()))?;
        let new = self.copy_of(&m, to);
        self.check_confirm(&new, confirm)?;
        let now = self.now();
        let stored = self.store.put(&self.build(new, now)?)?.into_memory();
        if let Some(root) = stored.scope.project_root() {
            self.enforce_bound(&root)?;
        }
        self.wake_embedder();
        Ok(stored)
    }

    fn copy_of(&self, m: &Memory, to: &Scope) -> NewMemory {
        NewMemory {
            scope: Some(to.clone()),
            content: m.content.clone(),
            kind: Some(m.kind.clone()),
            role: m.role,
            payload: m.payload.clone(),
            key: m.key.clone(),
            tags: m.tags.clone(),
            importance: Some(m.importance),
            source: Some(m.source),
            session: None,
            ttl: None,
            pinned: m.pinned,
            sensitive: m.sensitive,
            provenance: Some(Provenance {
                from_id: m.id.clone(),
                from_scope: m.scope.clone(),
                at: self.now(),
            }),
            created_at: None,
        }
    }

    /// Completes a task: promotes what should survive into `project/<project>`
    /// (new ids, provenance kept), then moves every memory of `task/<task>`
    /// (and below) to the archive with reason `task_completed`.
    pub fn complete_task(
        &self,
        task: &str,
        project: &str,
        promotion: &Promotion,
    ) -> Result<TaskReport> {
        let task_scope = Scope::task(task)?;
        let project_scope = Scope::project(project)?;
        if let Some(x) = promotion.min_importance {
            model::validate_importance(x)
                .map_err(|_| Error::field("min_importance", format!("{x} is outside 0.0–1.0")))?;
        }
        let now = self.now();
        let all = self
            .store
            .query(&Query::view(View::subtree(task_scope.clone()), now).order(Order::Oldest))?;
        for id in &promotion.ids {
            if !all.iter().any(|m| &m.id == id) {
                return Err(Error::field(
                    "promote",
                    format!("memory `{id}` is not an active memory of `{task_scope}`"),
                ));
            }
        }
        let chosen: Vec<&Memory> = all
            .iter()
            .filter(|m| {
                promotion.ids.contains(&m.id)
                    || promotion.min_importance.is_some_and(|x| m.importance >= x)
            })
            .collect();
        // A completion interrupted between its two steps is finished by
        // running it again: memories already copied are not copied twice.
        let copied: BTreeSet<String> = self
            .store
            .query(&Query::view(View::scope(project_scope.clone()), now).include_expired(true))?
            .into_iter()
            .filter_map(|m| m.provenance.map(|p| p.from_id))
            .collect();
        let chosen: Vec<&Memory> = chosen
            .into_iter()
            .filter(|m| !copied.contains(&m.id))
            .collect();
        let copies: Vec<NewMemory> = chosen
            .iter()
            .map(|m| self.copy_of(m, &project_scope))
            .collect();
        let stored = self.remember_batch(copies, Confirm::No)?;
        let promoted = chosen
            .iter()
            .map(|m| m.id.clone())
            .zip(stored.iter().map(|m| m.id.clone()))
            .collect();
        let ids: Vec<String> = all.iter().map(|m| m.id.clone()).collect();
        let archived = self.store.archive(&ids, "task_completed", now)?;
        Ok(TaskReport {
            task: task_scope.to_string(),
            project: project_scope.to_string(),
            promoted,
            archived,
        })
    }

    /// Expires TTLs and enforces project bounds across the store.
    pub fn upkeep(&self) -> Result<UpkeepReport> {
        let now = self.now();
        let f = Filter::parse(&json!({"expires_at": {"$lte": now.as_millisecond()}}))?;
        let expired: Vec<String> = self
            .store
            .query(&Query::everything(now).filter(f).include_expired(true))?
            .into_iter()
            .map(|m| m.id)
            .collect();
        let expired = self.store.archive(&expired, "expired", now)?;
        let mut evicted = 0;
        let roots: BTreeSet<Scope> = self
            .store
            .list_scopes()?
            .into_iter()
            .filter_map(|s| s.scope.project_root())
            .collect();
        for r in roots {
            evicted += self.enforce_bound(&r)?;
        }
        Ok(UpkeepReport { expired, evicted })
    }

    /// Scopes in use with their counts.
    pub fn list_scopes(&self) -> Result<Vec<ScopeCount>> {
        self.store.list_scopes()
    }

    /// Store-wide figures.
    pub fn stats(&self) -> Result<StoreStats> {
        self.store.stats()
    }

    // ---- sessions ----

    /// Creates a session. `id` defaults to a fresh UUIDv7, `scope` to
    /// `session/<id>`, `max_bytes` to the configured bound.
    pub fn create_session(
        &self,
        id: Option<&str>,
        scope: Option<Scope>,
        max_bytes: Option<u64>,
    ) -> Result<Session> {
        let id = match id {
            Some(i) => {
                model::validate_session_id(i)?;
                i.to_string()
            }
            None => uuid::Uuid::now_v7().simple().to_string(),
        };
        if let Some(m) = max_bytes
            && (m == 0 || m > i64::MAX as u64)
        {
            return Err(Error::field(
                "max_bytes",
                format!("{m} must be between 1 and {}", i64::MAX),
            ));
        }
        let now = self.now();
        let s = Session {
            scope: match scope {
                Some(s) => s,
                None => Scope::parse(&format!("session/{id}"))?,
            },
            id,
            created_at: now,
            last_activity_at: now,
            archived_at: None,
            max_bytes: max_bytes.unwrap_or(self.cfg.session_max_bytes),
            bytes: 0,
        };
        self.store.create_session(&s)?;
        Ok(s)
    }

    /// Every session, oldest first.
    pub fn list_sessions(&self) -> Result<Vec<Session>> {
        self.store.list_sessions()
    }

    /// A session's manifest: counts, size, first and last activity.
    pub fn session_manifest(&self, id: &str) -> Result<Manifest> {
        self.session_manifest_within(id, &Fence::everything())
    }

    /// A session's manifest as a caller limited to `fence` sees it: a
    /// session outside is not found, and memories outside are not counted.
    pub fn session_manifest_within(&self, id: &str, fence: &Fence) -> Result<Manifest> {
        model::validate_session_id(id)?;
        let session = self
            .store
            .get_session(id)?
            .filter(|s| fence.contains(&s.scope))
            .ok_or_else(|| Error::SessionNotFound(id.into()))?;
        let now = self.now();
        let q = Query::everything(now)
            .filter(Filter::parse(&json!({"session": id}))?)
            .include_expired(true);
        let mut active = self.store.query(&q)?;
        let mut archived = self.store.query_archived(&q)?;
        active.retain(|m| fence.contains(&m.scope));
        archived.retain(|a| fence.contains(&a.memory.scope));
        let mut by_kind = BTreeMap::new();
        let mut by_role = BTreeMap::new();
        for m in &active {
            *by_kind.entry(m.kind.to_string()).or_insert(0) += 1;
            if let Some(r) = m.role {
                *by_role.entry(r.to_string()).or_insert(0) += 1;
            }
        }
        let first = active
            .iter()
            .chain(archived.iter().map(|a| &a.memory))
            .map(|m| m.created_at)
            .min();
        let last = active
            .iter()
            .chain(archived.iter().map(|a| &a.memory))
            .map(|m| m.updated_at)
            .max();
        Ok(Manifest {
            memories: active.len() as u64,
            archived: archived.len() as u64,
            by_kind,
            by_role,
            tokens: active.iter().map(|m| m.tokens as u64).sum(),
            first_activity_at: first,
            last_activity_at: last.or(Some(session.last_activity_at)),
            session,
        })
    }

    /// Archives a session: no more writes; its memories move to the archive.
    pub fn archive_session(&self, id: &str) -> Result<Session> {
        self.archive_session_within(id, &Fence::everything())
    }

    /// Archives a session for a caller limited to `fence`: a session outside
    /// is not found. Should the session hold memories outside the fence
    /// (written before sessions were bound to their scope), only the
    /// caller's move to the archive and the session stays open for the
    /// others.
    pub fn archive_session_within(&self, id: &str, fence: &Fence) -> Result<Session> {
        model::validate_session_id(id)?;
        let now = self.now();
        if fence.is_everything() {
            return self.store.archive_session(id, now);
        }
        let session = self
            .store
            .get_session(id)?
            .filter(|s| fence.contains(&s.scope))
            .ok_or_else(|| Error::SessionNotFound(id.into()))?;
        let q = Query::everything(now)
            .filter(Filter::parse(&json!({"session": id}))?)
            .include_expired(true);
        let held = self.store.query(&q)?;
        if held.iter().all(|m| fence.contains(&m.scope)) {
            return self.store.archive_session(id, now);
        }
        let mine: Vec<String> = held
            .into_iter()
            .filter(|m| fence.contains(&m.scope))
            .map(|m| m.id)
            .collect();
        self.store.archive(&mine, "session_archived", now)?;
        Ok(self.store.get_session(id)?.unwrap_or(session))
    }

    // ---- the seeds' typed operations ----

    /// Records a conversation turn in a session (created on first use), in
    /// the session's scope.
    pub fn store_conversation(&self, session: &str, role: Role, message: &str) -> Result<Memory> {
        model::validate_session_id(session)?;
        let now = self.now();
        self.ensure_session(session, &Scope::parse(&format!("session/{session}"))?, now)?;
        let s = self
            .store
            .get_session(session)?
            .ok_or_else(|| Error::SessionNotFound(session.into()))?;
        self.remember(
            NewMemory::new(s.scope, message)
                .kind(Kind::Conversation)
                .role(role)
                .session(session),
        )
    }

    /// Records a decision with its options, choice and reasoning.
    pub fn store_decision(
        &self,
        scope: Scope,
        question: &str,
        options: &[String],
        chosen: &str,
        reasoning: &str,
    ) -> Result<Memory> {
        if question.trim().is_empty() {
            return Err(Error::field("question", "is empty"));
        }
        if chosen.trim().is_empty() {
            return Err(Error::field("chosen", "is empty"));
        }
        let content = format!("Decision: {question} — chose {chosen}. Reasoning: {reasoning}");
        self.remember(
            NewMemory::new(scope, content)
                .kind(Kind::Decision)
                .payload(json!({"question": question, "options": options, "chosen": chosen, "reasoning": reasoning})),
        )
    }

    /// Records a finding on a topic.
    pub fn store_finding(
        &self,
        scope: Scope,
        topic: &str,
        summary: &str,
        details: &str,
        sources: &[String],
    ) -> Result<Memory> {
        if topic.trim().is_empty() {
            return Err(Error::field("topic", "is empty"));
        }
        let content = if details.is_empty() {
            format!("{topic}: {summary}")
        } else {
            format!("{topic}: {summary}\n{details}")
        };
        self.remember(NewMemory::new(scope, content).kind(Kind::Finding).payload(
            json!({"topic": topic, "summary": summary, "details": details, "sources": sources}),
        ))
    }

    /// Records a preference under `key`: the same key in the same scope
    /// supersedes the old value and keeps it as history. Global preferences
    /// need `Confirm::Yes`.
    pub fn store_preference(
        &self,
        scope: Scope,
        key: &str,
        value: &str,
        confirm: Confirm,
    ) -> Result<Memory> {
        self.remember_with(
            NewMemory::new(scope, format!("{key}: {value}"))
                .kind(Kind::Preference)
                .key(key)
                .payload(json!({"key": key, "value": value})),
            confirm,
        )
    }

    /// The newest memories in a view, optionally of one kind.
    pub fn recent(&self, view: &View, limit: usize, kind: Option<&Kind>) -> Result<Vec<Memory>> {
        let mut req = List::new(view.clone());
        req.limit = limit;
        if let Some(k) = kind {
            req.filter = Filter::parse(&json!({"kind": k.as_str()}))?;
        }
        self.list(&req)
    }

    /// A session's conversation turns, oldest first.
    pub fn conversation_history(&self, session: &str) -> Result<Vec<Memory>> {
        model::validate_session_id(session)?;
        if self.store.get_session(session)?.is_none() {
            return Err(Error::SessionNotFound(session.into()));
        }
        let q = Query::everything(self.now())
            .filter(Filter::parse(
                &json!({"session": session, "kind": "conversation"}),
            )?)
            .order(Order::Oldest);
        self.store.query(&q)
    }

    /// Decisions in a view, optionally about a topic (full-text) and within a
    /// time range.
    pub fn find_decisions(
        &self,
        view: &View,
        topic: Option<&str>,
        since: Option<Timestamp>,
        until: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let mut f = vec![json!({"kind": "decision"})];
        if let Some(s) = since {
            f.push(json!({"created_at": {"$gte": s.as_millisecond()}}));
        }
        if let Some(u) = until {
            f.push(json!({"created_at": {"$lt": u.as_millisecond()}}));
        }
        self.find(view, Filter::parse(&json!({"$and": f}))?, topic, limit)
    }

    /// Findings in a view about a topic (full-text).
    pub fn find_findings(&self, view: &View, topic: &str, limit: usize) -> Result<Vec<Memory>> {
        self.find(
            view,
            Filter::parse(&json!({"kind": "finding"}))?,
            Some(topic),
            limit,
        )
    }

    fn find(
        &self,
        view: &View,
        filter: Filter,
        topic: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        match topic.filter(|t| !t.trim().is_empty()) {
            Some(t) => {
                let mut r = Recall::new(t, view.clone());
                r.filter = filter;
                r.strategy = Some(Strategy::Relevance);
                r.limit = limit;
                r.touch = false;
                Ok(self.recall(&r)?.into_iter().map(|r| r.memory).collect())
            }
            None => {
                let mut l = List::new(view.clone());
                l.filter = filter;
                l.limit = limit;
                self.list(&l)
            }
        }
    }

    pub(crate) fn now_for_export(&self) -> Timestamp {
        self.now()
    }
}

fn prefix_item(i: usize, e: Error) -> Error {
    match e {
        Error::InvalidField { field, reason } => Error::InvalidField {
            field: format!("item {i}: {field}"),
            reason,
        },
        Error::ItemTooLarge { size, limit } => Error::InvalidField {
            field: format!("item {i}: content"),
            reason: format!("{size} bytes, over the limit of {limit} bytes (`max_item_bytes`)"),
        },
        other => other,
    }
}
