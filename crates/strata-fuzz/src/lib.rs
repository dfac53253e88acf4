//! The fuzz targets of strata, one plain function per parser, each driving
//! the real code and checking what must hold whatever the input.
//!
//! `fuzz/` (cargo-fuzz, nightly) calls these functions from libFuzzer;
//! `tests/corpora.rs` (stable, in CI) replays every file of
//! `fuzz/corpus/<target>/` through them. A target panics only when strata
//! did something it must not: panicked itself, answered bad input with a
//! storage error or a 500, disagreed with its model, or half-applied a
//! failed import.
//!
//! | target | input | drives |
//! |---|---|---|
//! | [`filter`] | filter JSON | `Filter::parse`, then the SQLite compiler against the in-memory evaluator |
//! | [`jsonl_import`] | JSONL | `Engine::import` (all or nothing), export round trip |
//! | [`config_toml`] | `strata.toml` | `Config::apply_toml`, `Config::validate` |
//! | [`seed_yaml`] | the seeds' `memory.yaml` | `Config::apply_yaml`, `Config::validate` |
//! | [`profile`] | a `[profiles.<id>]` table | `FileProfile::validate`, context assembly within the budget |
//! | [`scope_view`] | scope and view lines | `Scope::parse`, `ViewEntry::parse`, `View::parse` |
//! | [`http_body`] | a route byte, then a body | the axum router in process, no 5xx |

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use jiff::Timestamp;
use serde_json::json;
use strata::{
    Config, ContextRequest, Engine, ErrorClass, Export, FileProfile, Filter, Kind, Memory,
    MemoryStore, OnConflict, Query, Role, Rows, Scope, Source, SqliteStore, TokenCounter, View,
    ViewEntry,
};

/// A fuzz target: panics when strata breaks an invariant on `data`.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and `fuzz/corpus/` name
/// them.
pub const TARGETS: [(&str, Target); 7] = [
    ("filter", filter),
    ("jsonl_import", jsonl_import),
    ("config_toml", config_toml),
    ("seed_yaml", seed_yaml),
    ("profile", profile),
    ("scope_view", scope_view),
    ("http_body", http_body),
];

/// Panics unless `e` is the caller's fault: bad input must never look like
/// a broken store, a missing file or a conflict.
fn assert_invalid(what: &str, input: &str, e: &strata::Error) {
    assert_eq!(
        e.class(),
        ErrorClass::Invalid,
        "{what}: {input:?} gave a non-input error: {e}"
    );
    assert!(!e.to_string().is_empty(), "{what}: an empty error message");
}

/// The time every target's stores are read at (2025-06-15), so that expiry
/// is the same from run to run.
fn fixed_now() -> Timestamp {
    Timestamp::from_millisecond(1_750_000_000_000).unwrap()
}

/// A complete memory as a store receives it.
fn memory(n: usize, scope: &str, content: &str) -> Memory {
    let at = Timestamp::from_millisecond(1_749_000_000_000 + n as i64 * 1000).unwrap();
    Memory {
        id: format!("m{n:08}"),
        scope: Scope::parse(scope).unwrap(),
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
        checksum: strata::checksum(content, None),
        version: 1,
        embedding: None,
        provenance: None,
    }
}

/// Memories that differ in every field a filter reads: each role, kinds,
/// tags (empty, repeated, non-ASCII), payloads of every JSON type, nested
/// objects and arrays, numbers at the edges of `i64` and `f64`.
fn filter_corpus() -> Vec<Memory> {
    let kinds = [
        "decision",
        "finding",
        "context",
        "conversation",
        "my-kind_2",
    ];
    let tags: [&[&str]; 6] = [&[], &["a"], &["b"], &["a", "b"], &["c", "a"], &["ü", "x y"]];
    let payloads = [
        None,
        Some(json!({"n": 1, "s": "x"})),
        Some(json!({"n": 2.5, "s": "y", "flag": true})),
        Some(json!({"n": "2", "nested": {"deep": 3, "list": [0, "1", [2]]}})),
        Some(json!({"flag": false, "s": null})),
        Some(json!({"list": [1, 2], "n": 3, "obj": {"0": "x", "a": {"b": -1}}})),
        Some(json!({"n": i64::MAX, "s": "", "big": u64::MAX})),
        Some(json!({"n": -0.0, "s": "é", "tiny": 1e-300, "huge": 1.5e300})),
        Some(json!({"n": i64::MIN, "s": "x\u{0}y", "list": []})),
        Some(json!({"arr": [1, 2, 3], "0": 5})),
        Some(json!({"n": 9_007_199_254_740_993_i64, "s": "Z"})),
    ];
    let roles = [
        None,
        Some(Role::User),
        Some(Role::Assistant),
        Some(Role::Tool),
    ];
    let sources = [
        Source::External,
        Source::Conversation,
        Source::Learned,
        Source::System,
    ];
    (0..48)
        .map(|i| {
            let scope = ["global", "project/f", "project/f/sub", "task/t-1"][i % 4];
            let mut m = memory(i, scope, &format!("memory number {i} ünïcode"));
            m.kind = kinds[i % kinds.len()].parse().unwrap();
            m.role = roles[i % roles.len()];
            m.source = sources[(i / 2) % sources.len()];
            m.importance = [0.0, 0.1, 0.5, 0.9, 0.7, 1.0][i % 6];
            m.tags = tags[i % tags.len()].iter().map(|t| t.to_string()).collect();
            m.payload = payloads[i % payloads.len()].clone();
            m.checksum = strata::checksum(&m.content, m.payload.as_ref());
            m.pinned = i % 5 == 0;
            m.sensitive = i % 7 == 3;
            m.key = (i % 4 == 1).then(|| format!("key{i}"));
            m.access_count = (i % 7) as u64;
            m.version = 1 + (i % 3) as u64;
            m.last_accessed_at = (i % 3 == 0).then_some(m.created_at);
            // Some expired (before `fixed_now`), some not yet.
            m.expires_at = match i % 6 {
                2 => Some(Timestamp::from_millisecond(1_749_500_000_000).unwrap()),
                4 => Some(Timestamp::from_millisecond(1_760_000_000_000).unwrap()),
                _ => None,
            };
            m
        })
        .collect()
}

struct FilterStores {
    model: MemoryStore,
    sqlite: SqliteStore,
    _dir: tempfile::TempDir,
}

fn filter_stores() -> &'static FilterStores {
    static STORES: OnceLock<FilterStores> = OnceLock::new();
    STORES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(dir.path().join("fuzz.db"), Default::default()).unwrap();
        let model = MemoryStore::new();
        for m in filter_corpus() {
            model.put(&m).unwrap();
            sqlite.put(&m).unwrap();
        }
        FilterStores {
            model,
            sqlite,
            _dir: dir,
        }
    })
}

/// Filter JSON: parse errors are input errors that name something; a
/// filter that parses parses again to the same tree, compiles to SQL that
/// SQLite runs, and selects exactly what the in-memory evaluator selects
/// (same ids, same order, same count), over a view and over everything.
pub fn filter(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let f = match Filter::parse_str(text) {
        Ok(f) => f,
        Err(e) => return assert_invalid("filter", text, &e),
    };
    assert_eq!(Filter::parse_str(text).unwrap(), f, "parsing is not stable");
    let stores = filter_stores();
    let views = [
        Query::everything(fixed_now()),
        Query::view(View::parse(&["project/**", "global"]).unwrap(), fixed_now())
            .include_expired(true),
    ];
    for q in views {
        let q = q.filter(f.clone());
        let ids = |got: strata::Result<Vec<Memory>>, who: &str| -> Vec<String> {
            match got {
                Ok(ms) => ms.into_iter().map(|m| m.id).collect(),
                Err(e) => panic!("{who} failed on filter {text:?} ({f:?}): {e}"),
            }
        };
        let want = ids(stores.model.query(&q), "the in-memory store");
        let got = ids(stores.sqlite.query(&q), "SQLite");
        assert_eq!(
            got, want,
            "SQLite and the model disagree on {text:?} ({f:?})"
        );
        let n = stores.sqlite.count(&q).unwrap();
        assert_eq!(n as usize, want.len(), "SQLite's count of {text:?}");
    }
}

/// Every memory, archived one and earlier version, and the sessions: what
/// a failed import must leave unchanged.
fn fingerprint(e: &Engine) -> String {
    let mut out = Vec::new();
    let everything = Export {
        view: None,
        session: None,
        include_sensitive: true,
        include_archived: true,
        include_history: true,
    };
    e.export(&everything, &mut out, &mut |_| {}).unwrap();
    let sessions = e.list_sessions().unwrap();
    format!(
        "{}\n{:?}\n{:?}",
        String::from_utf8(out).unwrap(),
        sessions,
        e.list_scopes().unwrap()
    )
}

fn export_all(e: &Engine) -> Vec<u8> {
    let mut out = Vec::new();
    let everything = Export {
        view: None,
        session: None,
        include_sensitive: true,
        include_archived: true,
        include_history: true,
    };
    e.export(&everything, &mut out, &mut |_| {}).unwrap();
    out
}

/// An in-memory engine without an embedder (none is built in; `auto`
/// would say so on stderr for every input).
fn quiet_engine() -> Engine {
    let mut cfg = Config::in_memory();
    cfg.embedder.kind = strata::EmbedderKind::None;
    Engine::open(cfg).unwrap()
}

/// An in-memory engine holding a few memories whose ids an input can name.
fn small_engine() -> Engine {
    let engine = quiet_engine();
    let mut lines = String::new();
    for (i, scope) in ["global", "project/acme", "task/t-1"].iter().enumerate() {
        let mut m = memory(i, scope, &format!("seeded memory {i}"));
        m.tags = vec!["seed".into()];
        lines.push_str(&serde_json::to_string(&m).unwrap());
        lines.push('\n');
    }
    engine
        .import(&mut lines.as_bytes(), OnConflict::Error, &mut |_| {})
        .unwrap();
    engine
}

/// JSONL import, the first byte choosing what a conflict does: bad input
/// is an input error and leaves the store exactly as it was (all or
/// nothing); input that imports exports again, and that export imports into
/// an empty engine and exports byte for byte the same.
pub fn jsonl_import(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let on_conflict = match mode % 3 {
        0 => OnConflict::Error,
        1 => OnConflict::Skip,
        _ => OnConflict::Replace,
    };
    let engine = small_engine();
    let before = fingerprint(&engine);
    let mut input = body;
    match engine.import(&mut input, on_conflict, &mut |_| {}) {
        Err(e) => {
            let text = String::from_utf8_lossy(body);
            // Conflicts (an id already stored, under `error`) are refusals,
            // not input errors; a storage error is a bug either way.
            assert!(
                matches!(e.class(), ErrorClass::Invalid | ErrorClass::Conflict),
                "import of {text:?} failed with a non-input error: {e}"
            );
            assert_eq!(
                fingerprint(&engine),
                before,
                "a failed import ({e}) changed the store"
            );
        }
        Ok(_) => {
            let first = export_all(&engine);
            let again = quiet_engine();
            if let Err(e) = again.import(&mut first.as_slice(), OnConflict::Error, &mut |_| {}) {
                panic!(
                    "an export does not import into an empty engine: {e}\n{}",
                    String::from_utf8_lossy(&first)
                );
            }
            let second = export_all(&again);
            assert!(
                first == second,
                "export, import, export changed the lines:\n{}\n---\n{}",
                String::from_utf8_lossy(&first),
                String::from_utf8_lossy(&second)
            );
        }
    }
}

/// Where relative paths in a fuzzed config resolve: never read, since
/// configuration parsing must not touch the filesystem.
const BASE: &str = "/nonexistent/strata-fuzz";

fn config_text(what: &str, data: &[u8], apply: fn(&mut Config, &str, &Path) -> strata::Result<()>) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut cfg = Config::in_memory();
    if let Err(e) = apply(&mut cfg, text, Path::new(BASE)) {
        return assert_invalid(what, text, &e);
    }
    if let Err(e) = cfg.validate() {
        assert_invalid(what, text, &e);
    }
}

/// `strata.toml`: errors are configuration errors, never a panic.
pub fn config_toml(data: &[u8]) {
    config_text("strata.toml", data, |c, t, b| c.apply_toml(t, Some(b)));
}

/// The seeds' `memory.yaml` (and strata's tables in YAML): errors are
/// configuration errors, never a panic.
pub fn seed_yaml(data: &[u8]) {
    config_text("memory.yaml", data, |c, t, b| c.apply_yaml(t, Some(b)));
}

fn profile_engine() -> &'static (Engine, TokenCounter) {
    static ENGINE: OnceLock<(Engine, TokenCounter)> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = quiet_engine();
        let mut lines = String::new();
        for (i, mut m) in filter_corpus().into_iter().enumerate() {
            // Long and short items, so that budgets cut and summarize.
            m.content = format!("{} {}", m.content, "word ".repeat(i * 7 % 90));
            m.checksum = strata::checksum(&m.content, m.payload.as_ref());
            m.tokens = 0;
            m.expires_at = None;
            lines.push_str(&serde_json::to_string(&m).unwrap());
            lines.push('\n');
        }
        engine
            .import(&mut lines.as_bytes(), OnConflict::Error, &mut |_| {})
            .unwrap();
        (engine, TokenCounter::new("cl100k_base").unwrap())
    })
}

/// A profile table (`[profiles.<id>]`, TOML): it validates or fails with a
/// configuration error; a valid profile assembles a context over a small
/// store whose rendering, counted afresh, stays within the budget.
pub fn profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file: FileProfile = match toml::from_str(text) {
        Ok(f) => f,
        Err(_) => return,
    };
    let p = match file.validate("fuzz") {
        Ok(p) => p,
        Err(e) => return assert_invalid("profile", text, &e),
    };
    let vars: BTreeMap<String, String> = [("project", "f"), ("task", "t-1"), ("session", "s-1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for s in &p.sources {
        if let Err(e) = s.view_entry(&vars) {
            assert_invalid("profile source", text, &e);
        }
    }
    let shares: f64 = p.shares().iter().sum();
    assert!(shares <= 1.0 + 1e-6, "shares add up to {shares}");
    let (engine, counter) = profile_engine();
    let mut req = ContextRequest::new("fuzz");
    req.vars = vars;
    req.query = "memory number".into();
    req.now = Some(fixed_now());
    match engine.context_with_profile(&p, &req) {
        Ok(pkg) => {
            let counted = pkg.count_tokens(counter, pkg.render);
            assert!(
                counted <= pkg.max_tokens && pkg.total_tokens <= pkg.max_tokens,
                "a context of {counted} tokens ({} reported) over its budget of {}: {text:?}",
                pkg.total_tokens,
                pkg.max_tokens
            );
        }
        Err(e) => assert_invalid("context", text, &e),
    }
}

/// Scope and view lines: a scope that parses parses again to itself, lies
/// within itself and its project root, and ends its own prefix list; a
/// view entry contains exactly the scopes its half-open string range says;
/// a view contains what one of its entries contains.
pub fn scope_view(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let mut scopes = Vec::new();
    let mut entries = Vec::new();
    for line in &lines {
        match Scope::parse(line) {
            Ok(s) => {
                assert_eq!(Scope::parse(s.as_str()).unwrap(), s, "{line:?}");
                assert!(s.is_within(&s));
                assert_eq!(s.prefixes().last(), Some(s.as_str()));
                for p in s.prefixes() {
                    let p = Scope::parse(p).unwrap_or_else(|e| panic!("prefix {p:?}: {e}"));
                    assert!(s.is_within(&p), "{s} not within its prefix {p}");
                }
                if let Some(root) = s.project_root() {
                    assert!(s.is_within(&root), "{s} not within its root {root}");
                }
                let _ = s.tier();
                scopes.push(s);
            }
            Err(e) => assert_invalid("scope", line, &e),
        }
        match ViewEntry::parse(line) {
            Ok(v) => {
                assert_eq!(ViewEntry::parse(&v.to_string()).unwrap(), v, "{line:?}");
                entries.push(v);
            }
            Err(e) => assert_invalid("view entry", line, &e),
        }
    }
    for v in &entries {
        let (lo, hi) = v.range();
        for s in &scopes {
            let below =
                s.as_str() > lo.as_str() && s.as_str() < hi.as_str() || s.as_str() == lo.as_str();
            let by_range = *s == v.scope || (v.subtree && below);
            assert_eq!(v.contains(s), by_range, "{v} and {s}: range {lo}..{hi}");
        }
    }
    match View::parse(&lines) {
        Ok(view) => {
            for s in &scopes {
                let any = view.entries().iter().any(|e| e.contains(s));
                assert_eq!(view.contains(s), any, "view {lines:?} and {s}");
            }
        }
        Err(e) => assert_invalid("view", text, &e),
    }
}

/// The routes [`http_body`] sends bodies to, chosen by the first byte.
const ROUTES: [(&str, &str, &str); 16] = [
    ("POST", "/v1/memories", "application/json"),
    ("POST", "/v1/memories/batch", "application/json"),
    ("PATCH", "/v1/memories/m00000001", "application/json"),
    ("POST", "/v1/recall", "application/json"),
    ("POST", "/v1/list", "application/json"),
    ("POST", "/v1/forget", "application/json"),
    ("POST", "/v1/promote", "application/json"),
    ("POST", "/v1/restore", "application/json"),
    ("POST", "/v1/tasks/t-1/complete", "application/json"),
    ("POST", "/v1/context", "application/json"),
    ("POST", "/v1/import", "application/x-ndjson"),
    ("POST", "/v1/import/foreign", "application/json"),
    ("POST", "/v1/sessions", "application/json"),
    ("POST", "/v1/learned/list", "application/json"),
    ("POST", "/v1/learned/run", "application/json"),
    ("POST", "/mcp", "application/json"),
];

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// An HTTP request body: the first byte picks a route (`ROUTES`), the rest
/// is the body. It goes through the real axum router (authentication off,
/// an in-memory engine with three memories, fresh for each input) and must
/// not be answered with a 5xx: bad input is the client's error.
pub fn http_body(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (method, path, content_type) = ROUTES[pick as usize % ROUTES.len()];
    // No upkeep thread: stopping one waits out its nap (up to 200 ms),
    // every input.
    let cfg = strata_server::ServerConfig {
        upkeep_every_secs: 0,
        ..Default::default()
    };
    let shared =
        strata_server::Shared::new(small_engine(), &cfg, strata_server::AuthMode::Off).unwrap();
    let app = strata_server::router(shared);
    let req = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", content_type)
        .header("accept", "application/json, text/event-stream")
        .body(axum::body::Body::from(body.to_vec()))
        .unwrap();
    let (status, answer) = runtime().block_on(async move {
        let mut svc = app;
        let resp = tower_service::Service::call(&mut svc, req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        (status, bytes)
    });
    assert!(
        !status.is_server_error(),
        "{method} {path} answered {status} to {:?}: {}",
        String::from_utf8_lossy(body),
        String::from_utf8_lossy(&answer)
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_target_takes_empty_and_junk_input() {
        for (_, target) in super::TARGETS {
            target(b"");
            target(b"\x00\xff{");
        }
    }
}
