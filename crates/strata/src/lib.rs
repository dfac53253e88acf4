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

mod agent;
mod audit;
mod cold;
mod config;
mod context;
mod embed;
mod engine;
mod error;
mod filter;
mod foreign;
mod jsonl;
mod learn;
mod llm;
mod model;
mod rank;
mod scope;
mod sealed;
mod secrets;
mod store;
mod sync;
mod text;
mod tokens;
mod when;

#[cfg(test)]
pub(crate) mod testutil;

// The whole public API, one path per item. The modules above are private;
// ARCHITECTURE.md says what each one holds.

// Memories, scopes and views.
pub use model::{
    Embedding, Kind, Memory, NewMemory, Provenance, Role, Source, checksum, parse_time, parse_ttl,
};
pub use scope::{Fence, Scope, Tier, View, ViewEntry};

// Secrets and personal data on write.
pub use secrets::{DETECTORS, Screened, Secret, SecretAction, SecretRule, redact, scan};

// The engine and its operations, each with its request and report.
pub use cold::{
    ColdDir, ColdLocation, ColdRecord, ColdStats, Reads as ColdReads, convert as convert_cold,
};
pub use config::{
    ColdConfig, CompactionConfig, Config, FileConfig, HotConfig, S3Config, StoreConfig,
    default_db_path,
};
pub use engine::{
    ArchiveMark, Compaction, Confirm, EmbedStatus, EmbedWorker, Engine, Forget, ForgetOptions,
    ForgetReport, List, ListOrder, Manifest, Patch, Promotion, QueryVector, Recall, Recalled,
    Remembered, TaskReport, UpkeepReport, open_store,
};
pub use error::{Error, ErrorClass};

// The audit trail: who did what, when, to which memories (never their
// content), as a hash chain.
pub use audit::{
    AuditChain, AuditConfig, AuditEntry, AuditEvent, AuditFilters, AuditPrune, AuditQuery,
    AuditVerify, GENESIS, MAX_IDS as AUDIT_MAX_IDS, MAX_QUERY_LIMIT as AUDIT_MAX_QUERY_LIMIT,
    local_actor, verify as verify_audit,
};

// Ranking and filtering.
pub use filter::{Field, Filter, Op, Scalar};
pub use rank::{
    DEFAULT_NEIGHBOUR_WEIGHT, DEFAULT_SESSION_WEIGHT, DEFAULT_SIMILARITY_BAND, DEFAULT_TIME_WEIGHT,
    Floor, Fusion, RankConfig, Relevance, ScoreParts, Signals, Strategy, Weights,
};
pub use text::query_terms;
pub use when::month_number;

// Context assembly.
pub use context::render::{markdown_heading, markdown_line};
pub use context::{
    ContextItem, ContextPackage, ContextRequest, Cut, FileProfile, FileProfiles, FileSource,
    Message, Profile, ProfileSource, Render, Replay, ShareOrBool, SourceUsage, SummarizerConfig,
    SummarizerKind, Summary, SummaryPick, Why,
};
pub use tokens::{TOKENIZERS, TokenCounter};

// Learning: what upkeep's detectors learn, and a person's say over it.
pub use learn::utterance;
pub use learn::{CONSOLIDATED, FADED, LearnConfig, LearnReport, Learned, LearnedStatus, LlmRun};

// Agents and pipelines.
pub use agent::{Agent, Depth, NodeRun, NodeSpec, Pipeline, WriteSpec};

// Embeddings.
#[cfg(feature = "local-embed")]
pub use embed::write_tiny_model;
pub use embed::{
    DEFAULT_MODEL, DEFAULT_QUERY_MAX_TOKENS, Embedder, EmbedderConfig, EmbedderKind,
    MINILM_PACKAGE, MINILM_SHA256, NO_LOCAL_EMBED, Purpose, default_model_dir, dot, file_sha256,
    normalize,
};

// Storage: the store traits (a backend implements them and passes the
// conformance suite), the two stores, and the types they exchange.
pub use store::{
    Access, Archived, AuditLog, ContextLog, Durability, ImportCounts, ImportItem, ImportRules,
    MemoryStore, OnConflict, Order, PendingVector, Put, Query, Refusal, Refused, Rows,
    SCHEMA_VERSION, ScopeCount, Session, Sessions, SqliteOptions, SqliteStore, Store, StoreStats,
    TextSearch, TierFigures, VectorCounts, VectorSearch, WriteTurn, refusals, without_waiting,
};
// Encryption at rest of a SQLite store (feature `encryption`).
pub use cold::{Converted, convert_store};
#[cfg(feature = "encryption")]
pub use sealed::Sealer;
pub use sealed::{SEALED_MAGIC, is_sealed, open as open_sealed};
pub use store::{Conversion, StoreKey};
#[cfg(feature = "postgres")]
pub use store::{PG_SCHEMA_VERSION, PostgresStore};
pub use store::{
    PostgresOptions, StoreDigest, TlsMode, copy_store, is_postgres_url, redact_url, store_digest,
};

// Import, export and file sync.
pub use foreign::{ForeignFormat, ForeignImport, ForeignInput, ForeignReport, NoteFile, Skipped};
pub use jsonl::{Export, ExportReport, parse_line};
pub use sync::{FILE_TAG, SyncReport};

/// Results of the strata engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;
