//! strata: layered, persistent memory for AI agents.
//!
//! An [`Engine`] stores what agents learn as [`Memory`] items in scopes
//! (`global`, `project/acme`, `task/t-42`, …), reads them back only through a
//! [`View`] that names the scopes a caller may see, ranks them (recency,
//! decayed importance, BM25 relevance, or a hybrid), and keeps each lifetime
//! tier in its bounds. The default store is one SQLite file; an in-memory
//! store serves ephemeral work and tests.
//!
//! ```
//! use strata::{Config, Engine, NewMemory, Kind, Recall, Scope, View};
//!
//! let engine = Engine::open(Config::in_memory())?;
//! let acme = Scope::parse("project/acme")?;
//! engine.remember(NewMemory::new(acme.clone(), "We chose PostgreSQL for the billing service").kind(Kind::Decision))?;
//! let hits = engine.recall(&Recall::new("which database for billing?", View::scope(acme)))?;
//! assert_eq!(hits.len(), 1);
//! # Ok::<(), strata::Error>(())
//! ```

pub mod agent;
mod config;
pub mod context;
pub mod embed;
mod engine;
mod error;
pub mod eval;
mod filter;
mod jsonl;
mod model;
mod rank;
mod scope;
pub mod store;
mod sync;
mod text;
mod tokens;

#[cfg(test)]
pub(crate) mod testutil;

pub use agent::{Agent, Depth, NodeRun, NodeSpec, Pipeline, WriteSpec};
pub use config::{Config, FileConfig, StoreConfig, default_db_path};
pub use context::{
    ContextItem, ContextPackage, ContextRequest, Message, Profile, Render, Replay, SourceUsage,
    SummarizerConfig, Summary, Why,
};
pub use embed::{Embedder, EmbedderConfig, EmbedderKind};
pub use engine::{
    ArchiveMark, Confirm, EmbedStatus, EmbedWorker, Engine, Forget, ForgetOptions, ForgetReport,
    List, ListOrder, Manifest, Patch, Promotion, QueryVector, Recall, Recalled, TaskReport,
    UpkeepReport,
};
pub use error::{Error, ErrorClass};
pub use filter::{Field, Filter, Op, Scalar};
pub use jsonl::{Export, ExportReport, parse_line};
pub use model::{
    Embedding, Kind, Memory, NewMemory, Provenance, Role, Source, checksum, parse_time, parse_ttl,
};
pub use rank::{Fusion, RankConfig, Relevance, ScoreParts, Signals, Strategy, Weights};
pub use scope::{Fence, Scope, Tier, View, ViewEntry};
pub use store::sqlite::scope_terms;
pub use store::{Access, Archived, ImportCounts, OnConflict, PendingVector, Session, StoreStats};
pub use sync::{FILE_TAG, SyncReport};
pub use text::query_terms;
pub use tokens::{TOKENIZERS, TokenCounter};

/// Results of the strata engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;
