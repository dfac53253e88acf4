//! Shared helpers: temporary stores and engines, memory builders.

use jiff::Timestamp;
use strata::{Config, Engine, Kind, Memory, Scope, Source, checksum};
use strata::{MemoryStore, SqliteStore, Store};

/// A backend under test, kept alive with its temporary directory (or
/// PostgreSQL schema, dropped after the store).
pub struct Backend {
    pub store: Box<dyn Store>,
    _dir: Option<tempfile::TempDir>,
    _pg: Option<PgSchema>,
}

/// The PostgreSQL server the tests use: `STRATA_TEST_PG_URL`. A build
/// without it marks the PostgreSQL tests ignored (`#[strata_testenv::pg]`);
/// one that had it but runs without it returns early from them, except in
/// CI (`CI` set), where a missing URL fails them.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub fn pg_url() -> Option<String> {
    match std::env::var("STRATA_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but STRATA_TEST_PG_URL is not: the PostgreSQL tests must run in CI")
        }
        _ => {
            eprintln!("STRATA_TEST_PG_URL is not set: PostgreSQL test not run");
            None
        }
    }
}

/// A fresh schema of the test server, dropped (with everything in it) when
/// the test ends, so tests stay independent and run in parallel.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub struct PgSchema {
    pub url: String,
    pub schema: String,
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl PgSchema {
    pub fn new() -> Option<PgSchema> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let url = pg_url()?;
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Some(PgSchema {
            url,
            schema: format!("t{}_{n}_{nanos}", std::process::id()),
        })
    }

    pub fn options(&self) -> strata::PostgresOptions {
        strata::PostgresOptions {
            schema: self.schema.clone(),
            pool_size: 8,
            ..Default::default()
        }
    }

    #[cfg(feature = "postgres")]
    pub fn open(&self) -> strata::PostgresStore {
        strata::PostgresStore::open(&self.url, self.options()).unwrap()
    }
}

#[cfg(feature = "postgres")]
impl Drop for PgSchema {
    fn drop(&mut self) {
        if let Ok(s) = strata::PostgresStore::open(&self.url, self.options()) {
            let _ = s.drop_schema();
        }
    }
}

impl Backend {
    pub fn memory() -> Backend {
        Backend {
            store: Box::new(MemoryStore::new()),
            _dir: None,
            _pg: None,
        }
    }

    pub fn sqlite() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("t.db"), Default::default()).unwrap();
        Backend {
            store: Box::new(store),
            _dir: Some(dir),
            _pg: None,
        }
    }

    /// A store in a fresh schema of the test server; `None` when no server
    /// is configured (outside CI).
    #[cfg(feature = "postgres")]
    pub fn postgres() -> Option<Backend> {
        let pg = PgSchema::new()?;
        Some(Backend {
            store: Box::new(pg.open()),
            _dir: None,
            _pg: Some(pg),
        })
    }
}

/// An engine under test with its temporary directory.
pub struct TestEngine {
    pub engine: Engine,
    pub dir: Option<tempfile::TempDir>,
    pub _pg: Option<PgSchema>,
}

impl std::ops::Deref for TestEngine {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl std::ops::DerefMut for TestEngine {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}

impl TestEngine {
    pub fn memory(cfg: impl FnOnce(&mut Config)) -> TestEngine {
        let mut c = Config::in_memory();
        c.embedder = strata::EmbedderConfig::none();
        cfg(&mut c);
        TestEngine {
            engine: Engine::open(c).unwrap(),
            dir: None,
            _pg: None,
        }
    }

    pub fn sqlite(cfg: impl FnOnce(&mut Config)) -> TestEngine {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::sqlite(dir.path().join("t.db"));
        c.embedder = strata::EmbedderConfig::none();
        cfg(&mut c);
        TestEngine {
            engine: Engine::open(c).unwrap(),
            dir: Some(dir),
            _pg: None,
        }
    }

    /// An engine over a fresh schema of the test server; `None` when no
    /// server is configured (outside CI).
    #[cfg(feature = "postgres")]
    pub fn postgres(cfg: impl FnOnce(&mut Config)) -> Option<TestEngine> {
        let pg = PgSchema::new()?;
        let mut c = Config {
            store: strata::StoreConfig::Postgres {
                url: pg.url.clone(),
                options: pg.options(),
            },
            embedder: strata::EmbedderConfig::none(),
            ..Config::default()
        };
        cfg(&mut c);
        Some(TestEngine {
            engine: Engine::open(c).unwrap(),
            dir: None,
            _pg: Some(pg),
        })
    }

    pub fn db_path(&self) -> std::path::PathBuf {
        self.dir.as_ref().unwrap().path().join("t.db")
    }
}

/// Instantiates each listed test function once per backend. Functions take
/// `fn(make: &dyn Fn() -> Backend)` (store tests) or `fn(make: &dyn Fn(&dyn
/// Fn(&mut Config)) -> TestEngine)` (engine tests).
macro_rules! backends {
    (store: $($name:ident),* $(,)?) => {
        mod memory_store { $( #[test] fn $name() { super::$name(&crate::harness::Backend::memory); } )* }
        mod sqlite_store { $( #[test] fn $name() { super::$name(&crate::harness::Backend::sqlite); } )* }
        #[cfg(feature = "postgres")]
        mod postgres_store { $( #[strata_testenv::pg] #[test] fn $name() {
            if crate::harness::pg_url().is_some() {
                super::$name(&|| crate::harness::Backend::postgres().unwrap());
            }
        } )* }
    };
    (engine: $($name:ident),* $(,)?) => {
        mod memory_engine { $( #[test] fn $name() { super::$name(&|c| crate::harness::TestEngine::memory(|x| c(x))); } )* }
        mod sqlite_engine { $( #[test] fn $name() { super::$name(&|c| crate::harness::TestEngine::sqlite(|x| c(x))); } )* }
        #[cfg(feature = "postgres")]
        mod postgres_engine { $( #[strata_testenv::pg] #[test] fn $name() {
            if crate::harness::pg_url().is_some() {
                super::$name(&|c| crate::harness::TestEngine::postgres(|x| c(x)).unwrap());
            }
        } )* }
    };
}

pub type MakeEngine<'a> = &'a dyn Fn(&dyn Fn(&mut Config)) -> TestEngine;
pub type MakeStore<'a> = &'a dyn Fn() -> Backend;

/// The error a configuration file's text gets (read, then validated).
pub fn config_error(toml: &str) -> String {
    let mut c = Config::in_memory();
    c.apply_toml(toml, None)
        .and_then(|()| c.validate())
        .expect_err(toml)
        .to_string()
}

pub fn scope(s: &str) -> Scope {
    Scope::parse(s).unwrap()
}

pub fn view(v: &[&str]) -> strata::View {
    strata::View::parse(v).unwrap()
}

static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A complete memory as a store receives it; ids sort by creation.
pub fn mem(scope_: &str, content: &str) -> Memory {
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let at = Timestamp::from_millisecond(1_750_000_000_000 + n as i64).unwrap();
    Memory {
        id: format!("m{n:08}"),
        scope: scope(scope_),
        kind: Kind::Context,
        role: None,
        content: content.into(),
        payload: None,
        key: None,
        tags: vec![],
        importance: 0.5,
        source: Source::External,
        session: None,
        created_at: at,
        updated_at: at,
        last_accessed_at: None,
        access_count: 0,
        expires_at: None,
        pinned: false,
        sensitive: false,
        tokens: content.split_whitespace().count().max(1) as u32,
        checksum: checksum(content, None),
        version: 1,
        embedding: None,
        provenance: None,
    }
}

/// Now, in the millisecond precision stores keep.
pub fn now() -> Timestamp {
    Timestamp::from_millisecond(Timestamp::now().as_millisecond()).unwrap()
}

/// Every memory (active, archived and history) as a sorted list of
/// `(id, version, archived)` plus the stats — a fingerprint that must not
/// change when an operation fails.
pub fn fingerprint(e: &Engine) -> String {
    let mut out = Vec::new();
    e.export(
        &strata::Export::user_data(None, None),
        &mut out,
        &mut |_| {},
    )
    .unwrap();
    let stats = e.stats().unwrap();
    format!(
        "{}\n{} {} {} {}",
        String::from_utf8(out).unwrap(),
        stats.memories,
        stats.archived,
        stats.history,
        stats.sessions
    )
}

/// A unit vector of 16 dimensions drawn from `h` by xorshift: well spread
/// and deterministic, for tests of vector search.
pub fn unit16(mut h: u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..16)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            (h % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    strata::normalize(&mut v);
    v
}
