//! The engine: validated writes, scoped reads, ranking, lifetime tiers,
//! sessions, forgetting, promotion and the seeds' typed operations.
//!
//! Every public operation is a plain synchronous call over a [`Store`]; the
//! engine holds no global state. Front ends (CLI, HTTP, MCP) call these and
//! nothing else.
//!
//! This file holds the engine, opening and plain reads by id; each
//! operation lives beside its request and report types: `write.rs`
//! (remember, batches, update), `recall.rs` (recall, list, count),
//! `forget.rs`, `lifecycle.rs` (promote, task completion, the project
//! bound, restore, upkeep), `sessions.rs`, `typed.rs` (the seeds' typed
//! operations), `vectors.rs` (embedders and the background embedding
//! worker), `access.rs` (the access log), `audit.rs` (recording, querying,
//! verifying and pruning the audit trail).

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

/// The fewest characters of an id [`Engine::resolve_id`] accepts.
const MIN_ID_PREFIX: usize = 8;

/// How many ids sharing a prefix are read to decide on it.
const PREFIX_SCAN: usize = 64;

mod access;
mod audit;
mod cold;
mod compact;
mod forget;
mod hot;
mod lifecycle;
mod recall;
mod sessions;
mod typed;
mod vectors;
mod write;

pub use self::compact::Compaction;
pub use self::forget::{Forget, ForgetOptions, ForgetReport};
pub use self::lifecycle::{ArchiveMark, Promotion, TaskReport, UpkeepReport};
pub use self::recall::{List, ListOrder, Recall, Recalled};
pub use self::sessions::Manifest;
pub(crate) use self::vectors::said_first;
pub use self::vectors::{EmbedStatus, EmbedWorker, QueryVector};
pub use self::write::{Patch, Remembered};

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

type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

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
    /// Who this engine is when it takes a lease: unique per engine.
    holder: String,
    /// The cold tier, when `[cold]` is on.
    cold: Option<crate::cold::ColdDir>,
    /// The hot tier: each session's last turns.
    hot: hot::Hot,
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

/// Opens the store a configuration names (creating or upgrading it).
pub fn open_store(cfg: &StoreConfig) -> Result<Box<dyn Store>> {
    Ok(match cfg {
        StoreConfig::Sqlite { path, options } => {
            Box::new(SqliteStore::open(path, options.clone())?)
        }
        #[cfg(feature = "postgres")]
        StoreConfig::Postgres { url, options } => {
            Box::new(crate::store::PostgresStore::open(url, options.clone())?)
        }
        #[cfg(not(feature = "postgres"))]
        StoreConfig::Postgres { url, .. } => {
            return Err(Error::InvalidConfig(format!(
                "store.url: `{}` is a PostgreSQL database, and this strata was built without the `postgres` feature",
                crate::store::redact_url(url)
            )));
        }
        StoreConfig::Memory => Box::new(MemoryStore::new()),
    })
}

impl Engine {
    /// Opens the engine a configuration describes.
    pub fn open(cfg: Config) -> Result<Engine> {
        cfg.validate()?;
        let store = open_store(&cfg.store)?;
        Engine::with_store(cfg, store)
    }

    /// An engine over an already opened store.
    ///
    /// A build without the `local-embed` feature, opened with the default
    /// `embedder.kind = "auto"`, can never have vectors: it says so once per
    /// process on stderr (and in [`Engine::embed_status`]), so keyword-only
    /// search is never a surprise. `kind = "none"` says it is meant.
    pub fn with_store(cfg: Config, store: Box<dyn Store>) -> Result<Engine> {
        cfg.validate()?;
        if !cfg!(feature = "local-embed") && cfg.embedder.kind == crate::EmbedderKind::Auto {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("strata: {}", crate::embed::NO_LOCAL_EMBED));
        }
        let tokens = TokenCounter::new(&cfg.tokenizer)?;
        let cold = match cfg.cold.resolve(&cfg.store)? {
            Some(at) => {
                let key = match &cfg.store {
                    crate::StoreConfig::Sqlite { options, .. } => options.key.as_ref(),
                    _ => None,
                };
                Some(crate::cold::ColdDir::open_at(&at, key)?)
            }
            None => None,
        };
        let hot = hot::Hot::new(&cfg.hot);
        let engine = Engine {
            store: Arc::from(store),
            cfg,
            tokens,
            clock: Arc::new(Timestamp::now),
            counts: Default::default(),
            embedder: OnceLock::new(),
            embed_signal: Default::default(),
            query_cache: Default::default(),
            access: Default::default(),
            holder: format!("{}:{}", std::process::id(), uuid::Uuid::now_v7().simple()),
            cold,
            hot,
        };
        // A move a crashed process left half done is finished now, unless
        // another process is moving memories (it holds the lease; the next
        // open or upkeep recovers).
        match engine.recover_cold() {
            Ok(_) => {}
            // An object store that is down: the warm tier is served, and
            // the next upkeep recovers.
            Err(e @ Error::Unavailable { .. }) => {
                eprintln!("strata: the cold tier is unreachable ({e}); upkeep recovers it later")
            }
            Err(e) => return Err(e),
        }
        Ok(engine)
    }

    /// Runs `f` under the store's lease `name`, held for `ttl` and ended
    /// when `f` returns; `None`, without running `f`, while another engine
    /// (in this process or another, on this machine or another) holds it.
    pub(crate) fn under_lease<T>(
        &self,
        name: &str,
        ttl: std::time::Duration,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        // One holder per call: two threads of this engine exclude each other too.
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let holder = format!(
            "{}#{}",
            self.holder,
            CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let now = self.now();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let until = Timestamp::from_millisecond(now.as_millisecond().saturating_add(ttl_ms))
            .unwrap_or(Timestamp::MAX);
        if !self.store.take_lease(name, &holder, now, until)? {
            return Ok(None);
        }
        let out = f();
        let ended = self.store.end_lease(name, &holder);
        let out = out?;
        ended?;
        Ok(Some(out))
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

    /// An active memory by id.
    pub fn get(&self, id: &str) -> Result<Option<Memory>> {
        if let Some(m) = self.hot.get(id) {
            return Ok(Some(m));
        }
        self.settle_accesses();
        self.store.get(id)
    }

    /// An archived memory by id, in the store or the cold tier.
    pub fn get_archived(&self, id: &str) -> Result<Option<Archived>> {
        let mut q = Query::everything(self.now());
        q.filter = Filter::parse(&json!({"id": id}))?;
        if let Some(a) = self.store.query_archived(&q)?.into_iter().next() {
            return Ok(Some(a));
        }
        Ok(self.cold_get(id)?.map(|r| Archived {
            memory: r.memory,
            archived_at: r.archived_at,
            reason: r.reason,
        }))
    }

    /// The id of the one active or archived memory inside `fence` whose id
    /// starts with `prefix` (a whole id, or the start of one a person typed). At least 8 characters; a prefix that
    /// names none is [`Error::NotFound`], one that names several an error
    /// listing them.
    pub fn resolve_id(&self, prefix: &str, fence: &Fence) -> Result<String> {
        if prefix.chars().count() < MIN_ID_PREFIX {
            return Err(Error::field(
                "id",
                format!(
                    "`{prefix}` is too short to name a memory: give at least {MIN_ID_PREFIX} characters of its id"
                ),
            ));
        }
        let mut found: Vec<(String, Scope)> = self.store.ids_with_prefix(prefix, PREFIX_SCAN)?;
        if let Some(c) = &self.cold {
            for (id, scope) in c.ids_with_prefix(prefix, PREFIX_SCAN)? {
                if let Ok(scope) = Scope::parse(&scope)
                    && !found.iter().any(|(f, _)| *f == id)
                {
                    found.push((id, scope));
                }
            }
        }
        let found: Vec<String> = found
            .into_iter()
            .filter(|(_, scope)| fence.contains(scope))
            .map(|(id, _)| id)
            .collect();
        if let Some(exact) = found.iter().find(|id| *id == prefix) {
            return Ok(exact.clone());
        }
        match found.as_slice() {
            [] => Err(Error::NotFound(prefix.to_string())),
            [one] => Ok(one.clone()),
            many => Err(Error::field(
                "id",
                format!(
                    "`{prefix}` names {}{} memories ({}{}): give more of the id",
                    if many.len() >= PREFIX_SCAN {
                        "at least "
                    } else {
                        ""
                    },
                    many.len(),
                    many.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                    if many.len() > 3 { ", …" } else { "" }
                ),
            )),
        }
    }

    /// Earlier versions of a memory, oldest first (a cold memory's from
    /// its segment).
    pub fn history(&self, id: &str) -> Result<Vec<Memory>> {
        let h = self.store.history(id)?;
        if h.is_empty()
            && let Some(r) = self.cold_get(id)?
        {
            return Ok(r.history);
        }
        Ok(h)
    }

    /// Scopes in use with their counts.
    pub fn list_scopes(&self) -> Result<Vec<ScopeCount>> {
        self.store.list_scopes()
    }

    /// Store-wide figures, with each storage tier's memories and bytes.
    pub fn stats(&self) -> Result<StoreStats> {
        let mut s = self.store.stats()?;
        s.storage_tiers.insert(
            "warm".into(),
            crate::store::TierFigures {
                memories: s.memories + s.archived,
                bytes: s.file_bytes,
                at: None,
            },
        );
        if self.hot.turns() > 0 {
            let h = self.hot.figures();
            s.storage_tiers.insert(
                "hot".into(),
                crate::store::TierFigures {
                    memories: h.memories,
                    bytes: h.bytes,
                    at: None,
                },
            );
        }
        if let Some(c) = &self.cold {
            let cs = c.stats()?;
            s.storage_tiers.insert(
                "cold".into(),
                crate::store::TierFigures {
                    memories: cs.memories,
                    bytes: cs.bytes,
                    at: Some(c.path().display().to_string()),
                },
            );
        }
        Ok(s)
    }

    pub(crate) fn now_for_export(&self) -> Timestamp {
        self.now()
    }
}
