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
//! worker), `access.rs` (the access log).

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
mod forget;
mod lifecycle;
mod recall;
mod sessions;
mod typed;
mod vectors;
mod write;

pub use self::forget::{Forget, ForgetOptions, ForgetReport};
pub use self::lifecycle::{ArchiveMark, Promotion, TaskReport, UpkeepReport};
pub use self::recall::{List, ListOrder, Recall, Recalled};
pub use self::sessions::Manifest;
pub use self::vectors::{EmbedStatus, EmbedWorker, QueryVector};
pub use self::write::Patch;

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

    /// Scopes in use with their counts.
    pub fn list_scopes(&self) -> Result<Vec<ScopeCount>> {
        self.store.list_scopes()
    }

    /// Store-wide figures.
    pub fn stats(&self) -> Result<StoreStats> {
        self.store.stats()
    }

    pub(crate) fn now_for_export(&self) -> Timestamp {
        self.now()
    }
}
