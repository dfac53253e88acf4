//! Configuration: one validated [`Config`] opens an [`Engine`](crate::Engine).
//!
//! Sources merge in this order, later winning: built-in defaults, a
//! `strata.toml` file, then whatever the front end sets (CLI flags, the
//! `STRATA_DB` environment variable). Unknown keys in the file are errors
//! that name them: a typo must not silently fall back to a default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::audit::AuditConfig;
use crate::cold::ColdLocation;
use crate::context::{FileProfile, FileProfiles, Profile, SummarizerConfig};
use crate::embed::EmbedderConfig;
use crate::error::Error;
use crate::learn::LearnConfig;
use crate::rank::RankConfig;
use crate::secrets::SecretRule;
use crate::store::{
    Durability, PostgresOptions, SqliteOptions, StoreKey, TlsMode, is_postgres_url,
};
use crate::tokens::TokenCounter;

/// Where memories are stored.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreConfig {
    /// One SQLite file (the default).
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// Connection options.
        options: SqliteOptions,
    },
    /// A PostgreSQL database (feature `postgres`; a build without it
    /// refuses to open one, saying so).
    Postgres {
        /// `postgres://user@host:port/database` (a password here is
        /// allowed, but better given through `options.password`).
        url: String,
        /// Connection options.
        options: PostgresOptions,
    },
    /// Process memory; gone when the engine is dropped.
    Memory,
}

impl StoreConfig {
    /// Where the store is, for messages: a path, a URL with its password
    /// hidden, or `memory`.
    pub fn describe(&self) -> String {
        match self {
            StoreConfig::Sqlite { path, .. } => path.display().to_string(),
            StoreConfig::Postgres { url, options } => {
                let u = crate::store::redact_url(url);
                if options.schema == "public" {
                    u
                } else {
                    format!("{u} (schema {})", options.schema)
                }
            }
            StoreConfig::Memory => "memory".into(),
        }
    }

    /// The store `--db`/`STRATA_DB` names: a `postgres://` URL, else a
    /// SQLite file path. Options of the same backend in `self` are kept.
    pub fn with_location(&self, db: &str) -> StoreConfig {
        if is_postgres_url(db) {
            let options = match self {
                StoreConfig::Postgres { options, .. } => options.clone(),
                _ => PostgresOptions::default(),
            };
            StoreConfig::Postgres {
                url: db.to_string(),
                options,
            }
        } else {
            let options = match self {
                StoreConfig::Sqlite { options, .. } => options.clone(),
                _ => SqliteOptions::default(),
            };
            StoreConfig::Sqlite {
                path: PathBuf::from(db),
                options,
            }
        }
    }
}

/// Everything needed to open an engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The backend.
    pub store: StoreConfig,
    /// Tokenizer used to count `tokens` (see [`crate::tokens::TOKENIZERS`]).
    pub tokenizer: String,
    /// Most active memories per project (`project/<p>` and below); 0 = no bound.
    pub max_items: u64,
    /// Share of `max_items` moved to the archive when the bound is exceeded.
    pub evict_fraction: f64,
    /// Largest content + payload of one memory, in bytes.
    pub max_item_bytes: usize,
    /// Default size bound of a session, in bytes.
    pub session_max_bytes: u64,
    /// Ranking and decay.
    pub ranking: RankConfig,
    /// Context profiles by id (`"none"` and `"global"` are built in).
    pub profiles: BTreeMap<String, Profile>,
    /// The LLM summarizer's endpoint, if any.
    pub summarizer: Option<SummarizerConfig>,
    /// The embedder behind vector search (default `auto`: the local model
    /// when it is installed, else BM25 alone).
    pub embedder: EmbedderConfig,
    /// The detectors upkeep runs.
    pub learning: LearnConfig,
    /// The cold tier (segment files for archived and demoted memories).
    pub cold: ColdConfig,
    /// The hot tier (each session's last turns in this process's memory).
    pub hot: HotConfig,
    /// Session compaction (upkeep summarises a full session's oldest turns).
    pub compaction: CompactionConfig,
    /// What happens to secrets and personal data written into each scope
    /// (none: stored as written).
    pub secrets: Vec<SecretRule>,
    /// The audit trail.
    pub audit: AuditConfig,
}

/// `[hot]`: the last turns of each session, held in the memory of a
/// long-running process (an agent handle, `strata serve`, `strata mcp`).
///
/// A session's ring is a write-through cache (the store has every turn)
/// unless the session was opened ephemeral: then its turns live only
/// here and vanish with the process.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotConfig {
    /// Turns (memories of the session, newest last) each ring holds
    /// (0: no hot tier, and no ephemeral sessions).
    pub turns: usize,
    /// Sessions whose rings one process holds; the least recently read
    /// write-through ring leaves first, and opening an ephemeral session
    /// beyond this is refused.
    pub sessions: usize,
    /// Bytes (content and payload) the ephemeral sessions of one process
    /// hold together; a write beyond is refused (413 `too_large` over
    /// HTTP), as a write beyond one session's `max_bytes` is
    /// (`session_full`). Default 256 MiB.
    pub ephemeral_bytes: u64,
}

impl Default for HotConfig {
    fn default() -> HotConfig {
        HotConfig {
            turns: 100,
            sessions: 10_000,
            ephemeral_bytes: 256 << 20,
        }
    }
}

/// `[compaction]`: upkeep compacts a session that nears its byte bound —
/// its oldest memories are summarised (extractive; the LLM summariser when
/// `[summarizer]` is set) into one `summary` memory that names them, and
/// they move to the archive (reason `compacted`), and from there to the
/// cold tier when it is on.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionConfig {
    /// Whether upkeep compacts sessions.
    pub enabled: bool,
    /// A session whose bytes reach this share of its `max_bytes` is
    /// compacted (0–1).
    pub at: f64,
    /// … down to this share (0–`at`).
    pub to: f64,
    /// Token budget of each summary.
    pub summary_tokens: u32,
}

impl Default for CompactionConfig {
    fn default() -> CompactionConfig {
        CompactionConfig {
            enabled: true,
            at: 0.9,
            to: 0.5,
            summary_tokens: 300,
        }
    }
}

/// `[cold]`: where archived memories go when they leave the store.
///
/// Off by default. When on, upkeep moves every archived memory (evicted,
/// expired, completed tasks, archived sessions) and every unpinned memory
/// not touched for `demote_after_days`, or whose decayed importance fell
/// under `demote_below_importance`, out of the store into compressed
/// segment files in `dir` (default: beside a SQLite file, `<db>.cold/`;
/// required for PostgreSQL and in-memory stores) or in a bucket of an
/// S3-compatible object store (`[cold.s3]`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColdConfig {
    /// Whether upkeep moves memories to the cold tier.
    pub enabled: bool,
    /// The segment directory.
    pub dir: Option<PathBuf>,
    /// A bucket of an S3-compatible object store instead of a directory
    /// (`[cold.s3]`; the `s3` feature).
    pub s3: Option<S3Config>,
    /// Active, unpinned memories whose last update or read is older than
    /// this many days are demoted (0: never by age).
    pub demote_after_days: u64,
    /// Active, unpinned memories whose decayed importance (the ranking's
    /// `importance × kind_weight × decay × access factor`, before the
    /// `ranking.min_importance` floor) is under this are demoted, unless
    /// updated or read in the last day (0: never by importance). Default
    /// 0.1, the ranking floor's default: a memory that ranks at the floor
    /// leaves the store its searches scan.
    pub demote_below_importance: f64,
    /// A memory demoted to cold that recalls return this many times
    /// (counted by the recalls that record access) comes back to the store
    /// as an active memory at the next upkeep (0: never).
    pub promote_after_reads: u64,
}

impl Default for ColdConfig {
    fn default() -> ColdConfig {
        ColdConfig {
            enabled: false,
            dir: None,
            s3: None,
            demote_after_days: 30,
            demote_below_importance: 0.1,
            promote_after_reads: 3,
        }
    }
}

impl ColdConfig {
    /// Where the segments of `store` go, when the tier is on.
    pub fn resolve(&self, store: &StoreConfig) -> Result<Option<ColdLocation>, Error> {
        if !self.enabled {
            return Ok(None);
        }
        self.location_for(store).map(Some)
    }

    /// Where the segments of `store` are (or would be), whether or not
    /// the tier is on: `s3`, else `dir`, else beside a SQLite file.
    pub fn location_for(&self, store: &StoreConfig) -> Result<ColdLocation, Error> {
        match (&self.dir, &self.s3) {
            (Some(_), Some(_)) => Err(Error::InvalidConfig(
                "cold: give `dir` or `[cold.s3]`, not both".into(),
            )),
            (None, Some(s3)) => {
                s3.validate()?;
                Ok(ColdLocation::S3(s3.clone()))
            }
            (Some(d), None) => Ok(ColdLocation::Dir(d.clone())),
            (None, None) => match store {
                StoreConfig::Sqlite { path, .. } => {
                    let mut p = path.clone().into_os_string();
                    p.push(".cold");
                    Ok(ColdLocation::Dir(PathBuf::from(p)))
                }
                _ => Err(Error::InvalidConfig(format!(
                    "cold.dir: required with the store `{}` (only a SQLite file has a default), \
                     or `[cold.s3]`",
                    store.describe()
                ))),
            },
        }
    }
}

/// `[cold.s3]`: a bucket of an S3-compatible object store (AWS S3, MinIO,
/// Ceph, R2, ...) for the cold tier's segments, reached with path-style
/// URLs and AWS Signature Version 4. The credentials come from the
/// environment, never from the file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3Config {
    /// The bucket (it must exist).
    pub bucket: String,
    /// A key prefix the tier's objects go under (`strata/cold/`; empty:
    /// the bucket's top).
    pub prefix: String,
    /// The endpoint URL (`http://127.0.0.1:9000`); default
    /// `https://s3.<region>.amazonaws.com`.
    pub endpoint: Option<String>,
    /// The signing region.
    pub region: String,
    /// The environment variable holding the access key id.
    pub access_key_env: String,
    /// The environment variable holding the secret access key.
    pub secret_key_env: String,
    /// The environment variable holding a session token, if set.
    pub session_token_env: String,
    /// How long one request may take, in milliseconds.
    pub timeout_ms: u64,
}

impl Default for S3Config {
    fn default() -> S3Config {
        S3Config {
            bucket: String::new(),
            prefix: String::new(),
            endpoint: None,
            region: "us-east-1".into(),
            access_key_env: "AWS_ACCESS_KEY_ID".into(),
            secret_key_env: "AWS_SECRET_ACCESS_KEY".into(),
            session_token_env: "AWS_SESSION_TOKEN".into(),
            timeout_ms: 30_000,
        }
    }
}

impl S3Config {
    /// `s3://bucket/prefix`, how errors and stats name the tier.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix.trim_matches('/'))
            .trim_end_matches('/')
            .to_string()
    }

    /// The endpoint, no trailing slash.
    pub fn endpoint_url(&self) -> String {
        match &self.endpoint {
            Some(e) => e.trim_end_matches('/').to_string(),
            None => format!("https://s3.{}.amazonaws.com", self.region),
        }
    }

    /// Checks each field, naming the first that is wrong.
    pub fn validate(&self) -> Result<(), Error> {
        let bad =
            |field: &str, why: String| Err(Error::InvalidConfig(format!("cold.s3.{field}: {why}")));
        let b = &self.bucket;
        if b.len() < 3
            || b.len() > 63
            || !b
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
            || !b.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !b.ends_with(|c: char| c.is_ascii_alphanumeric())
        {
            return bad(
                "bucket",
                format!(
                    "`{b}` is not a bucket name (3 to 63 lower-case letters, digits, `.` and \
                     `-`, starting and ending with a letter or digit)"
                ),
            );
        }
        if self.prefix.starts_with('/') || self.prefix.contains("//") {
            return bad(
                "prefix",
                format!("`{}` starts with `/` or has an empty part", self.prefix),
            );
        }
        if self.prefix.len() > 512 || self.prefix.chars().any(char::is_control) {
            return bad(
                "prefix",
                "over 512 bytes or holds a control character".into(),
            );
        }
        if let Some(e) = &self.endpoint {
            let rest = e
                .strip_prefix("http://")
                .or_else(|| e.strip_prefix("https://"));
            match rest {
                Some(r)
                    if !r.trim_end_matches('/').is_empty()
                        && !r.trim_end_matches('/').contains(['/', '?', '#', ' ']) => {}
                _ => {
                    return bad(
                        "endpoint",
                        format!("`{e}` is not an http:// or https:// URL of a host (and port)"),
                    );
                }
            }
        }
        if self.region.is_empty()
            || !self
                .region
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        {
            return bad(
                "region",
                format!("`{}` is not a region name (`us-east-1`)", self.region),
            );
        }
        for (field, v) in [
            ("access_key_env", &self.access_key_env),
            ("secret_key_env", &self.secret_key_env),
            ("session_token_env", &self.session_token_env),
        ] {
            if v.is_empty() || v.contains(['=', '\0']) {
                return bad(
                    field,
                    format!("`{v}` is not an environment variable's name"),
                );
            }
        }
        if self.timeout_ms == 0 || self.timeout_ms > 3_600_000 {
            return bad(
                "timeout_ms",
                format!("{} must be between 1 and 3600000", self.timeout_ms),
            );
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            store: StoreConfig::Sqlite {
                path: default_db_path(),
                options: SqliteOptions::default(),
            },
            tokenizer: "cl100k_base".into(),
            max_items: 1000,
            evict_fraction: 0.1,
            max_item_bytes: 1 << 20,
            session_max_bytes: 10 * 1000 * 1000,
            ranking: RankConfig::default(),
            profiles: BTreeMap::new(),
            summarizer: None,
            embedder: EmbedderConfig::default(),
            learning: LearnConfig::default(),
            cold: ColdConfig::default(),
            hot: HotConfig::default(),
            compaction: CompactionConfig::default(),
            secrets: Vec::new(),
            audit: AuditConfig::default(),
        }
    }
}

/// The default database: `$XDG_DATA_HOME/strata/strata.db` (or the
/// platform's data directory), else `./strata.db`.
pub fn default_db_path() -> PathBuf {
    dirs::data_dir().map_or_else(
        || PathBuf::from("strata.db"),
        |d| d.join("strata").join("strata.db"),
    )
}

/// The `[store]` table of `strata.toml`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileStore {
    /// `sqlite`, `postgres` or `memory` (a `url` implies `postgres`).
    pub backend: Option<String>,
    /// PostgreSQL: `postgres://user@host:port/database`.
    pub url: Option<String>,
    /// PostgreSQL: the environment variable holding the password (default
    /// `STRATA_DB_PASSWORD`, then libpq's `PGPASSWORD`).
    pub password_env: Option<String>,
    /// PostgreSQL: most connections per process.
    pub pool_size: Option<usize>,
    /// PostgreSQL: connect timeout, in milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// PostgreSQL: `disable`, `prefer` or `require`.
    pub tls: Option<TlsMode>,
    /// PostgreSQL: a PEM file of extra certificate authorities.
    pub tls_ca_file: Option<PathBuf>,
    /// PostgreSQL: the schema strata's tables live in (default `public`).
    pub schema: Option<String>,
    /// Database path (relative paths are relative to the config file).
    pub path: Option<PathBuf>,
    /// `full` or `normal`.
    pub durability: Option<Durability>,
    /// Writer wait, in milliseconds.
    pub busy_timeout_ms: Option<u64>,
    /// MiB of the file read through a memory map (0: none).
    pub mmap_mib: Option<u64>,
    /// MiB of vectors a process keeps in memory for exact search (0:
    /// none; `SqliteOptions::vector_cache_bytes`).
    pub vector_cache_mib: Option<u64>,
    /// SQLite, encrypted (feature `encryption`): the environment variable
    /// holding the key (default `STRATA_KEY`, used when set).
    pub key_env: Option<String>,
    /// SQLite, encrypted: a file holding the key (relative to the config
    /// file). Never the key itself: a config file is no place for it.
    pub key_file: Option<PathBuf>,
}

/// The `[memory]` table of `strata.toml`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileMemory {
    /// Tokenizer name.
    pub tokenizer: Option<String>,
    /// Per-project bound.
    pub max_items: Option<u64>,
    /// Eviction share.
    pub evict_fraction: Option<f64>,
    /// Item size bound.
    pub max_item_bytes: Option<usize>,
    /// Session size bound.
    pub session_max_bytes: Option<u64>,
}

/// The shape of `strata.toml`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[store]`
    #[serde(default)]
    pub store: FileStore,
    /// `[memory]`
    #[serde(default)]
    pub memory: FileMemory,
    /// `[server]`: read and validated by `strata-server` (`strata serve`,
    /// `strata mcp`); the engine ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<serde_json::Value>,
    /// `[ranking]`
    pub ranking: Option<RankConfig>,
    /// `[profiles.<id>]`
    pub profiles: Option<BTreeMap<String, FileProfile>>,
    /// The seeds' `context_profiles` (a list with ids, or a map).
    pub context_profiles: Option<FileProfiles>,
    /// `[summarizer]`
    pub summarizer: Option<SummarizerConfig>,
    /// `[embedder]`
    pub embedder: Option<EmbedderConfig>,
    /// `[learning]`
    pub learning: Option<LearnConfig>,
    /// `[cold]`
    pub cold: Option<ColdConfig>,
    /// `[hot]`
    pub hot: Option<HotConfig>,
    /// `[compaction]`
    pub compaction: Option<CompactionConfig>,
    /// `[[secrets]]`
    pub secrets: Option<Vec<SecretRule>>,
    /// `[audit]`
    pub audit: Option<AuditConfig>,
}

/// The seeds' `memory:` section of `memory.yaml`: store bounds and the
/// HEAD/TAIL policy. Only what strata has a meaning for is read.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SeedMemory {
    /// Free id.
    pub memory_config_id: Option<String>,
    /// `task`, `project`, `global` stores; `project.max_items` is used.
    #[serde(default)]
    pub stores: BTreeMap<String, serde_json::Value>,
    /// Ignored (strata has no compression modes).
    pub compression_policy: Option<serde_json::Value>,
    /// `head_tail_preserve` becomes the default `head_tail` of profiles.
    pub context_policy: Option<serde_json::Value>,
    /// Free metadata.
    pub metadata: Option<serde_json::Value>,
}

impl Config {
    /// A configuration for an in-memory engine.
    pub fn in_memory() -> Config {
        Config {
            store: StoreConfig::Memory,
            ..Config::default()
        }
    }

    /// A configuration for the SQLite file at `path`.
    pub fn sqlite(path: impl Into<PathBuf>) -> Config {
        Config {
            store: StoreConfig::Sqlite {
                path: path.into(),
                options: SqliteOptions::default(),
            },
            ..Config::default()
        }
    }

    /// Reads `strata.toml` (or, for a `.yaml`/`.yml` path, the seeds'
    /// `memory.yaml`) at `path` over the defaults.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let mut cfg = Config::default();
        let yaml = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
        let applied = if yaml {
            cfg.apply_yaml(&text, path.parent())
        } else {
            cfg.apply_toml(&text, path.parent())
        };
        applied.map_err(|e| {
            Error::InvalidConfig(format!(
                "{}: {}",
                path.display(),
                e.to_string().trim_start_matches("config: ")
            ))
        })?;
        Ok(cfg)
    }

    /// Applies `strata.toml` text; relative paths resolve against `base`.
    pub fn apply_toml(&mut self, text: &str, base: Option<&Path>) -> Result<(), Error> {
        let file: FileConfig =
            toml::from_str(text).map_err(|e| Error::InvalidConfig(e.to_string()))?;
        self.apply_file(file, None, base)
    }

    /// Applies YAML text: the same tables as `strata.toml`, plus the seeds'
    /// `memory.yaml` layout (`memory:` with `stores` and `context_policy`,
    /// `context_profiles:`).
    pub fn apply_yaml(&mut self, text: &str, base: Option<&Path>) -> Result<(), Error> {
        let mut doc: serde_json::Value =
            serde_norway::from_str(text).map_err(|e| Error::InvalidConfig(format!("YAML: {e}")))?;
        if doc.is_null() {
            doc = serde_json::json!({});
        }
        // `memory:` is either strata's table or the seeds' MemoryConfig.
        let mut seed = None;
        if let Some(m) = doc.get("memory") {
            let seeds_keys = [
                "memory_config_id",
                "stores",
                "compression_policy",
                "context_policy",
            ];
            if m.as_object()
                .is_some_and(|o| o.keys().any(|k| seeds_keys.contains(&k.as_str())))
            {
                let s: SeedMemory = serde_json::from_value(m.clone())
                    .map_err(|e| Error::InvalidConfig(format!("memory: {e}")))?;
                seed = Some(s);
                if let Some(o) = doc.as_object_mut() {
                    o.remove("memory");
                }
            }
        }
        let file: FileConfig =
            serde_json::from_value(doc).map_err(|e| Error::InvalidConfig(e.to_string()))?;
        self.apply_file(file, seed, base)
    }

    fn apply_file(
        &mut self,
        file: FileConfig,
        seed: Option<SeedMemory>,
        base: Option<&Path>,
    ) -> Result<(), Error> {
        let store_set = file.store.path.is_some()
            || file.store.durability.is_some()
            || file.store.busy_timeout_ms.is_some()
            || file.store.mmap_mib.is_some()
            || file.store.vector_cache_mib.is_some();
        let pg_set = file.store.url.is_some()
            || file.store.password_env.is_some()
            || file.store.pool_size.is_some()
            || file.store.connect_timeout_ms.is_some()
            || file.store.tls.is_some()
            || file.store.tls_ca_file.is_some()
            || file.store.schema.is_some();
        let backend = match file.store.backend.as_deref() {
            // No backend named: keep the current one unless SQLite or
            // PostgreSQL settings are given.
            None if file.store.url.is_some() => Some("postgres"),
            None if matches!(self.store, StoreConfig::Memory) && !store_set => Some("memory"),
            None if matches!(self.store, StoreConfig::Postgres { .. }) && !store_set => {
                Some("postgres")
            }
            None => Some("sqlite"),
            b => b,
        };
        if backend != Some("postgres") && pg_set {
            return Err(Error::InvalidConfig(format!(
                "store: url, password_env, pool_size, connect_timeout_ms, tls, tls_ca_file and schema are PostgreSQL settings, but the backend is `{}`",
                backend.unwrap_or("sqlite")
            )));
        }
        match backend {
            Some("postgres") | Some("postgresql") => {
                if store_set {
                    return Err(Error::InvalidConfig(
                        "store: path, durability, busy_timeout_ms, mmap_mib and vector_cache_mib are SQLite settings, but the backend is `postgres`".into(),
                    ));
                }
                let (mut url, mut options) = match &self.store {
                    StoreConfig::Postgres { url, options } => (Some(url.clone()), options.clone()),
                    _ => (None, PostgresOptions::default()),
                };
                if let Some(u) = file.store.url {
                    if !is_postgres_url(&u) {
                        return Err(Error::InvalidConfig(format!(
                            "store.url: `{}` is not a PostgreSQL URL (postgres://user@host:port/database)",
                            crate::store::redact_url(&u)
                        )));
                    }
                    url = Some(u);
                }
                let url = url.ok_or_else(|| {
                    Error::InvalidConfig(
                        "store.url: the postgres backend needs a URL (postgres://user@host:port/database)".into(),
                    )
                })?;
                if let Some(n) = file.store.pool_size {
                    if n == 0 {
                        return Err(Error::InvalidConfig(
                            "store.pool_size: must be at least 1".into(),
                        ));
                    }
                    options.pool_size = n;
                }
                if let Some(ms) = file.store.connect_timeout_ms {
                    options.connect_timeout = Duration::from_millis(ms);
                }
                if let Some(t) = file.store.tls {
                    options.tls = t;
                }
                if let Some(f) = file.store.tls_ca_file {
                    options.ca_file = Some(match base {
                        Some(b) if f.is_relative() => b.join(f),
                        _ => f,
                    });
                }
                if let Some(sc) = file.store.schema {
                    options.schema = sc;
                }
                if let Some(var) = file.store.password_env {
                    options.password = Some(std::env::var(&var).map_err(|_| {
                        Error::InvalidConfig(format!(
                            "store.password_env: the environment variable `{var}` is not set"
                        ))
                    })?);
                }
                self.store = StoreConfig::Postgres { url, options };
            }
            None | Some("sqlite") => {
                let (mut path, mut options) = match &self.store {
                    StoreConfig::Sqlite { path, options } => (path.clone(), options.clone()),
                    _ => (default_db_path(), SqliteOptions::default()),
                };
                if let Some(p) = file.store.path {
                    path = match base {
                        Some(b) if p.is_relative() => b.join(p),
                        _ => p,
                    };
                }
                if let Some(d) = file.store.durability {
                    options.durability = d;
                }
                if let Some(ms) = file.store.busy_timeout_ms {
                    options.busy_timeout = Duration::from_millis(ms);
                }
                options.key = match (file.store.key_env, file.store.key_file) {
                    (Some(_), Some(_)) => {
                        return Err(Error::InvalidConfig(
                            "store.key_env, store.key_file: give one of the two".into(),
                        ));
                    }
                    (Some(var), None) => Some(StoreKey::from_env(&var)?.ok_or_else(|| {
                        Error::InvalidConfig(format!(
                            "store.key_env: the environment variable `{var}` is not set"
                        ))
                    })?),
                    (None, Some(f)) => Some(StoreKey::from_file(&match base {
                        Some(b) if f.is_relative() => b.join(f),
                        _ => f,
                    })?),
                    (None, None) => options.key.take(),
                };
                if let Some(mib) = file.store.mmap_mib {
                    options.mmap_bytes = mib.checked_mul(1 << 20).ok_or_else(|| {
                        Error::InvalidConfig(format!("store.mmap_mib: {mib} MiB is too large"))
                    })?;
                }
                if let Some(mib) = file.store.vector_cache_mib {
                    options.vector_cache_bytes = usize::try_from(mib)
                        .ok()
                        .and_then(|m| m.checked_mul(1 << 20))
                        .ok_or_else(|| {
                            Error::InvalidConfig(format!(
                                "store.vector_cache_mib: {mib} MiB is too large"
                            ))
                        })?;
                }
                self.store = StoreConfig::Sqlite { path, options };
            }
            Some("memory") => self.store = StoreConfig::Memory,
            Some(other) => {
                return Err(Error::InvalidConfig(format!(
                    "store.backend: `{other}` is not one of sqlite, postgres, memory"
                )));
            }
        }
        let m = file.memory;
        if let Some(t) = m.tokenizer {
            self.tokenizer = t;
        }
        if let Some(x) = m.max_items {
            self.max_items = x;
        }
        if let Some(x) = m.evict_fraction {
            self.evict_fraction = x;
        }
        if let Some(x) = m.max_item_bytes {
            self.max_item_bytes = x;
        }
        if let Some(x) = m.session_max_bytes {
            self.session_max_bytes = x;
        }
        if let Some(r) = file.ranking {
            self.ranking = r;
        }
        if let Some(l) = file.learning {
            self.learning = l;
        }
        if let Some(c) = file.cold {
            self.cold = c;
        }
        if let Some(h) = file.hot {
            self.hot = h;
        }
        if let Some(c) = file.compaction {
            self.compaction = c;
        }
        if let Some(r) = file.secrets {
            self.secrets = r;
        }
        if let Some(a) = file.audit {
            self.audit = a;
        }
        let mut default_head_tail = None;
        if let Some(seed) = seed {
            if let Some(n) = seed
                .stores
                .get("project")
                .and_then(|p| p.get("max_items"))
                .and_then(|v| v.as_u64())
            {
                self.max_items = n;
            }
            default_head_tail = seed
                .context_policy
                .as_ref()
                .and_then(|p| p.get("head_tail_preserve"))
                .and_then(|v| v.as_i64());
        }
        let mut profiles: BTreeMap<String, FileProfile> = file.profiles.unwrap_or_default();
        if let Some(cp) = file.context_profiles {
            for (id, p) in cp.into_map()? {
                if profiles.insert(id.clone(), p).is_some() {
                    return Err(Error::InvalidConfig(format!(
                        "profiles.{id}: defined both in profiles and context_profiles"
                    )));
                }
            }
        }
        for (id, mut p) in profiles {
            if p.head_tail.is_none() {
                p.head_tail = default_head_tail;
            }
            let prof = p.validate(&id)?;
            self.profiles.insert(id, prof);
        }
        if let Some(mut e) = file.embedder {
            if let (Some(b), Some(d)) = (base, &e.model_dir)
                && d.is_relative()
            {
                e.model_dir = Some(b.join(d));
            }
            self.embedder = e;
        }
        if let Some(s) = file.summarizer {
            s.validate()?;
            self.summarizer = Some(s);
        }
        self.validate()
    }

    /// Checks every value; errors name the key.
    pub fn validate(&self) -> Result<(), Error> {
        TokenCounter::new(&self.tokenizer)
            .map_err(|e| Error::InvalidConfig(format!("memory.tokenizer: {e}")))?;
        if !(self.evict_fraction > 0.0 && self.evict_fraction <= 1.0) {
            return Err(Error::InvalidConfig(format!(
                "memory.evict_fraction: {} must be in (0, 1]",
                self.evict_fraction
            )));
        }
        if self.max_item_bytes == 0 {
            return Err(Error::InvalidConfig(
                "memory.max_item_bytes: must be positive".into(),
            ));
        }
        if self.session_max_bytes == 0 || self.session_max_bytes > i64::MAX as u64 {
            return Err(Error::InvalidConfig(format!(
                "memory.session_max_bytes: {} must be between 1 and {}",
                self.session_max_bytes,
                i64::MAX
            )));
        }
        self.embedder.validate()?;
        self.learning.validate()?;
        if self.cold.demote_after_days > 365 * 1000 {
            return Err(Error::InvalidConfig(format!(
                "cold.demote_after_days: {} is over 365000",
                self.cold.demote_after_days
            )));
        }
        let floor = self.cold.demote_below_importance;
        if !(0.0..=1.0).contains(&floor) {
            return Err(Error::InvalidConfig(format!(
                "cold.demote_below_importance: {floor} must be between 0 and 1"
            )));
        }
        let c = &self.compaction;
        if !(c.at > 0.0 && c.at <= 1.0) {
            return Err(Error::InvalidConfig(format!(
                "compaction.at: {} must be above 0 and at most 1",
                c.at
            )));
        }
        if !(c.to >= 0.0 && c.to < c.at) {
            return Err(Error::InvalidConfig(format!(
                "compaction.to: {} must be at least 0 and under compaction.at ({})",
                c.to, c.at
            )));
        }
        if !(16..=8000).contains(&c.summary_tokens) {
            return Err(Error::InvalidConfig(format!(
                "compaction.summary_tokens: {} must be between 16 and 8000",
                c.summary_tokens
            )));
        }
        if self.hot.turns > 100_000 {
            return Err(Error::InvalidConfig(format!(
                "hot.turns: {} is over 100000",
                self.hot.turns
            )));
        }
        if self.hot.turns > 0 && self.hot.sessions == 0 {
            return Err(Error::InvalidConfig(
                "hot.sessions: must be at least 1 while hot.turns is above 0".into(),
            ));
        }
        if self.hot.ephemeral_bytes == 0 {
            return Err(Error::InvalidConfig(
                "hot.ephemeral_bytes: must be positive (the bytes ephemeral sessions hold together)"
                    .into(),
            ));
        }
        self.cold.resolve(&self.store)?;
        crate::secrets::validate_rules(&self.secrets)?;
        self.audit.validate()?;
        self.ranking.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_and_names_bad_keys() {
        let mut c = Config::default();
        c.apply_toml(
            "[store]\npath = \"x.db\"\n[memory]\nmax_items = 5\n[ranking]\nhalf_life_days = 10.0\n",
            Some(Path::new("/tmp/conf")),
        )
        .unwrap();
        assert_eq!(c.max_items, 5);
        assert_eq!(c.ranking.half_life_days, 10.0);
        assert!(
            matches!(&c.store, StoreConfig::Sqlite { path, .. } if path == Path::new("/tmp/conf/x.db"))
        );

        // A file without [store] leaves an in-memory config in memory.
        let mut m = Config::in_memory();
        m.apply_toml("[memory]\nmax_items = 5\n", None).unwrap();
        assert_eq!(m.store, StoreConfig::Memory);

        let e = Config::default()
            .apply_toml("[memory]\nmax_itemz = 5\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_itemz"), "{e}");
        let e = Config::default()
            .apply_toml("[memory]\ntokenizer = \"nope\"\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory.tokenizer"), "{e}");
        let e = Config::default()
            .apply_toml("[store]\nbackend = \"redis\"\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store.backend"), "{e}");
        let e = Config::default()
            .apply_toml("[ranking]\nhalf_life_days = -1.0\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("half_life_days"), "{e}");
    }

    #[test]
    fn audit_section_is_read_and_unknown_keys_are_named() {
        let mut c = Config::default();
        assert!(!c.audit.enabled);
        c.apply_toml(
            "[audit]\nenabled = true\nretention_days = 30\nmax_entries = 500\n",
            None,
        )
        .unwrap();
        assert_eq!(
            c.audit,
            AuditConfig {
                enabled: true,
                retention_days: 30,
                max_entries: 500
            }
        );
        let e = Config::default()
            .apply_toml("[audit]\nretention = 3\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("retention"), "{e}");
        let e = Config::default()
            .apply_toml("[audit]\nretention_days = 99999999\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("audit.retention_days"), "{e}");
    }

    #[test]
    fn mmap_size_is_set_in_mib_and_bad_values_are_named() {
        let mut c = Config::default();
        c.apply_toml(
            "[store]
mmap_mib = 0
",
            None,
        )
        .unwrap();
        assert!(matches!(&c.store, StoreConfig::Sqlite { options, .. } if options.mmap_bytes == 0));
        c.apply_toml(
            "[store]
mmap_mib = 64
",
            None,
        )
        .unwrap();
        assert!(
            matches!(&c.store, StoreConfig::Sqlite { options, .. } if options.mmap_bytes == 64 << 20)
        );
        for bad in [
            "mmap_mib = -1",
            "mmap_mib = \"big\"",
            "mmap_mib = 18446744073709551615",
        ] {
            let e = Config::default()
                .apply_toml(&format!("[store]\n{bad}\n"), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("mmap_mib"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_vector_copy_is_set_in_mib_and_bad_values_are_named() {
        let mut c = Config::default();
        for (text, bytes) in [("0", 0), ("16", 16usize << 20)] {
            c.apply_toml(&format!("[store]\nvector_cache_mib = {text}\n"), None)
                .unwrap();
            assert!(
                matches!(&c.store, StoreConfig::Sqlite { options, .. } if options.vector_cache_bytes == bytes),
                "{text}"
            );
        }
        for bad in [
            "vector_cache_mib = -1",
            "vector_cache_mib = \"big\"",
            "vector_cache_mib = 18446744073709551615",
        ] {
            let e = Config::default()
                .apply_toml(&format!("[store]\n{bad}\n"), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("vector_cache_mib"), "{bad}: {e}");
        }
        let e = Config::default()
            .apply_toml(
                "[store]\nbackend = \"postgres\"\nurl = \"postgres://x@127.0.0.1/db\"\nvector_cache_mib = 8\n",
                None,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("vector_cache_mib"), "{e}");
    }
}
