//! The on-disk format: versions, reopening, and files from the future.

use strata::Error;
use strata::{ContextLog, Rows, SqliteStore, VectorSearch};

use crate::harness::mem;

#[test]
fn reopening_keeps_data_and_applies_no_migration_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let m = mem("project/a", "survives a reopen");
    {
        let s = SqliteStore::open(&path, Default::default()).unwrap();
        s.put(&m).unwrap();
    }
    let s = SqliteStore::open(&path, Default::default()).unwrap();
    assert_eq!(s.get(&m.id).unwrap(), Some(m));
    let c = rusqlite::Connection::open(&path).unwrap();
    let rows: i64 = c
        .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, strata::SCHEMA_VERSION);
    assert_eq!(s.stats().unwrap().schema_version, strata::SCHEMA_VERSION);
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    drop(SqliteStore::open(&path, Default::default()).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "INSERT INTO schema_version (version, applied_at) VALUES (99, 0)",
        [],
    )
    .unwrap();
    drop(c);
    let err = SqliteStore::open(&path, Default::default()).unwrap_err();
    assert!(
        matches!(err, Error::SchemaTooNew { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade strata"));
}

#[test]
fn processes_creating_one_file_at_once_agree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let p = path.clone();
            std::thread::spawn(move || SqliteStore::open(&p, Default::default()).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let c = rusqlite::Connection::open(&path).unwrap();
    let rows: i64 = c
        .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, strata::SCHEMA_VERSION);
}

#[test]
fn a_version_1_file_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let mut m = mem("project/a", "written by version 1");
    m.embedding = Some(strata::Embedding {
        model: "some-model".into(),
        vector: vec![0.6, 0.8],
    });
    let mut learned = mem("project/a", "learned before the index of learned memories");
    learned.source = strata::Source::Learned;
    {
        let s = SqliteStore::open(&path, Default::default()).unwrap();
        s.put(&m).unwrap();
        s.put(&learned).unwrap();
    }
    // Turn the file back into what schema version 1 left.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "DROP INDEX memories_embedding_model; DROP TABLE vector_models;
         ALTER TABLE memories DROP COLUMN vector_seq;
         DROP TABLE context_log; DROP TABLE scope_counts; DROP TABLE leases; DROP TABLE audit; DROP TABLE audit_chain;
         DROP TABLE text_index_state;
         DROP INDEX memories_learned;
         DROP INDEX memories_scope; CREATE INDEX memories_scope ON memories(scope, created_at);
         DROP INDEX archive_scope; CREATE INDEX archive_scope ON archive(scope, created_at);
         DELETE FROM schema_version WHERE version > 1;",
    )
    .unwrap();
    text_index_of_version_8(&c);
    c.execute_batch("INSERT INTO memories_fts(memories_fts, rank) VALUES('automerge', 4);")
        .unwrap();
    drop(c);
    let s = SqliteStore::open(&path, Default::default()).unwrap();
    assert_eq!(s.get(&m.id).unwrap(), Some(m));
    // The per-scope counts were filled from the rows already there.
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c
        .query_row(
            "SELECT n FROM scope_counts WHERE scope = 'project/a'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 2);
    s.log_context("ctx-1", jiff::Timestamp::now(), "{}")
        .unwrap();
    assert_eq!(s.context_log("ctx-1").unwrap().as_deref(), Some("{}"));
    // Version 3 recorded the dimension of the vectors already there.
    assert_eq!(
        s.vector_models().unwrap(),
        vec![("some-model".to_string(), 2, 1)]
    );
    assert_eq!(s.vector_counts("some-model").unwrap().pending, 1);
    assert_eq!(s.vector_counts("another").unwrap().pending, 2);
    assert_eq!(s.stats().unwrap().schema_version, strata::SCHEMA_VERSION);
    // Version 6 indexed the learned memory already there: text search,
    // which reads it through that index only, finds it.
    let hits = strata::TextSearch::search_signals(
        &s,
        &strata::Query::view(crate::harness::view(&["project/a"]), crate::harness::now()),
        &strata::query_terms("learned index"),
        10,
    )
    .unwrap();
    assert_eq!(hits.len(), 1);
    assert!(hits[0].0.learned);
    // Version 8 left merging the text index to the store's thread: FTS5
    // no longer merges inside commits.
    let automerge: i64 = c
        .query_row(
            "SELECT v FROM memories_fts_config WHERE k = 'automerge'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(automerge, 0);
}

/// The text index of a file from before version 9: `content` and
/// `scopes`, positions and lengths kept, filled from the rows; no
/// `scope_ids` (version 10).
fn text_index_of_version_8(c: &rusqlite::Connection) {
    text_index_before_10(c, false);
}

/// The text index of a file before version 10 (`content` and `scopes`
/// filled from the rows), with version 9's empty `scoped` column when
/// `scoped`: version 10 drops that index whatever it holds.
fn text_index_before_10(c: &rusqlite::Connection, scoped: bool) {
    let (columns, options) = if scoped {
        ("content, scopes, scoped", "detail=column, columnsize=0,")
    } else {
        ("content, scopes", "")
    };
    c.execute_batch(&format!(
        "DROP TABLE scope_ids;
         DROP TABLE memories_fts;
         CREATE VIRTUAL TABLE memories_fts USING fts5({columns}, content='', {options}
             tokenize='porter unicode61 remove_diacritics 2');
         INSERT INTO memories_fts(memories_fts, rank) VALUES('secure-delete', 1);
         INSERT INTO memories_fts(memories_fts, rank) VALUES('automerge', 0);"
    ))
    .unwrap();
    let rows: Vec<(i64, String, String)> = c
        .prepare("SELECT rowid, content, scope FROM memories")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    for (rowid, content, scope) in rows {
        let terms = SqliteStore::scope_terms(&strata::Scope::parse(&scope).unwrap());
        c.execute(
            "INSERT INTO memories_fts(rowid, content, scopes) VALUES (?, ?, ?)",
            rusqlite::params![rowid, content, terms],
        )
        .unwrap();
    }
}

/// The columns of the text index.
fn fts_columns(c: &rusqlite::Connection) -> Vec<String> {
    c.prepare("SELECT name FROM pragma_table_info('memories_fts')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// The rowids FTS5 holds under `token` in the `scoped` column.
fn scoped_postings(c: &rusqlite::Connection, token: &str) -> Vec<i64> {
    c.prepare("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?")
        .unwrap()
        .query_map([format!("scoped : \"{token}\"")], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// The number `scope_ids` gave `scope`.
fn scope_id(c: &rusqlite::Connection, scope: &strata::Scope) -> i64 {
    c.query_row(
        "SELECT id FROM scope_ids WHERE scope = ?",
        [scope.as_str()],
        |r| r.get(0),
    )
    .unwrap()
}

/// Files of versions 8 (no scoped terms) and 9 (scoped terms beside the
/// stemmed content) get version 10's index: scopes numbered, every row
/// indexed under its scoped terms, the same results and scores.
#[test]
fn older_files_get_the_scoped_text_index() {
    for version in [8, 9] {
        upgrade_text_index_from(version);
    }
}

fn upgrade_text_index_from(version: i64) {
    use strata::{Query, Rows, TextSearch};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let texts = [
        ("project/a", "billing moved to postgres"),
        ("project/a", "postgres replication lag"),
        ("project/a/x", "billing invoices run nightly"),
        ("project/ab", "billing for the other project"),
        ("task/t1", "postgres upgrade checklist"),
        ("global", "always page the billing owner"),
    ];
    let ms: Vec<_> = texts.iter().map(|(s, t)| mem(s, t)).collect();
    let views: [&[&str]; 4] = [
        &["project/a"],
        &["project/a/**"],
        &["task/t1", "project/a", "global"],
        &["project/ab"],
    ];
    // The views, then every scope (looked up by prefix, as views of more
    // than `SCOPED_MAX` scopes are).
    let queries: Vec<Query> = views
        .iter()
        .map(|v| Query::view(crate::harness::view(v), crate::harness::now()))
        .chain([Query::everything(crate::harness::now())])
        .collect();
    let search = |s: &SqliteStore| -> Vec<Vec<(String, u64)>> {
        queries
            .iter()
            .map(|q| {
                s.search_signals(q, &strata::query_terms("billing postgres"), 10)
                    .unwrap()
                    .into_iter()
                    .map(|(sig, score)| (sig.id, (score * 1e9) as u64))
                    .collect()
            })
            .collect()
    };
    let want = {
        let s = SqliteStore::open(&path, Default::default()).unwrap();
        for m in &ms {
            s.put(m).unwrap();
        }
        search(&s)
    };
    assert_eq!(want[0].len(), 2, "{want:?}");
    assert_eq!(want[1].len(), 3, "{want:?}");
    assert_eq!(want[2].len(), 4, "{want:?}");
    assert_eq!(want[3].len(), 1, "{want:?}");
    assert_eq!(want[4].len(), 6, "{want:?}");
    let c = rusqlite::Connection::open(&path).unwrap();
    text_index_before_10(&c, version == 9);
    c.execute("DELETE FROM schema_version WHERE version > ?", [version])
        .unwrap();
    let s = SqliteStore::open(&path, Default::default()).unwrap();
    assert_eq!(s.stats().unwrap().schema_version, strata::SCHEMA_VERSION);
    // Version 10 numbered each scope holding memories, indexed every row
    // under its scoped terms, kept FTS5's options, and ranks as before.
    assert_eq!(search(&s), want, "from version {version}");
    let numbered: i64 = c
        .query_row("SELECT COUNT(*) FROM scope_ids", [], |r| r.get(0))
        .unwrap();
    assert_eq!(numbered, 5);
    let columns = fts_columns(&c);
    assert_eq!(columns, ["scopes", "scoped"]);
    let token =
        |m: &strata::Memory, word: &str| SqliteStore::scoped_terms(word, scope_id(&c, &m.scope));
    let rowid = |id: &str| -> i64 {
        c.query_row("SELECT rowid FROM memories WHERE id = ?", [id], |r| {
            r.get(0)
        })
        .unwrap()
    };
    assert_eq!(
        scoped_postings(&c, &token(&ms[0], "postgres")),
        vec![rowid(&ms[0].id), rowid(&ms[1].id)]
    );
    for (k, v) in [("secure-delete", 1), ("automerge", 0)] {
        let got: i64 = c
            .query_row("SELECT v FROM memories_fts_config WHERE k = ?", [k], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(got, v, "{k}");
    }
    // A delete takes the scoped terms out with the rest.
    let gone = rowid(&ms[0].id);
    s.delete(std::slice::from_ref(&ms[0].id)).unwrap();
    assert_eq!(
        scoped_postings(&c, &token(&ms[0], "postgres")),
        vec![rowid(&ms[1].id)]
    );
    assert!(!scoped_postings(&c, &token(&ms[0], "moved")).contains(&gone));
    c.execute_batch("INSERT INTO memories_fts(memories_fts) VALUES('integrity-check')")
        .unwrap();
    let after = search(&s);
    assert_eq!((after[0].len(), after[4].len()), (1, 5));
}

/// A delete names the index entries it removes by the scope's number: a
/// row whose scope has lost its number (a hand-edited file) cannot be
/// taken out of the index, so the delete fails as corrupt data, naming the
/// scope, and the row stays.
#[test]
fn a_delete_without_the_scopes_number_is_refused() {
    use strata::Rows;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = SqliteStore::open(&path, Default::default()).unwrap();
    let m = mem("project/lost", "a memory whose scope loses its number");
    s.put(&m).unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("DELETE FROM scope_ids WHERE scope = 'project/lost'", [])
        .unwrap();
    let err = s.delete(std::slice::from_ref(&m.id)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("project/lost"), "{err}");
    assert_eq!(s.get(&m.id).unwrap(), Some(m));
}

/// A row migration 10 cannot index (its scope unreadable) stops the
/// migration with an error naming the value, and the file stays as it was:
/// version 8, its old text index, no scope numbers.
#[test]
fn a_corrupt_row_stops_migration_10_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let s = SqliteStore::open(&path, Default::default()).unwrap();
        s.put(&mem("project/a", "indexed before")).unwrap();
        s.put(&mem("project/a", "soon corrupt")).unwrap();
    }
    let c = rusqlite::Connection::open(&path).unwrap();
    text_index_of_version_8(&c);
    c.execute_batch(
        "DELETE FROM schema_version WHERE version > 8;
         UPDATE memories SET scope = 'not a scope' WHERE content = 'soon corrupt';",
    )
    .unwrap();
    let err = SqliteStore::open(&path, Default::default()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("not a scope"), "{err}");
    let version: i64 = c
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 8);
    let columns = fts_columns(&c);
    assert_eq!(columns, ["content", "scopes"]);
    let numbers: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'scope_ids'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(numbers, 0);
    let found: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH 'content : indexed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(found, 1);
}

/// docs/schema.md is the contract: every table, column and index of a new
/// file is named there.
#[test]
fn the_schema_page_names_every_table_column_and_index() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/schema.md"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    drop(SqliteStore::open(&path, Default::default()).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    let objects: Vec<(String, String)> = c
        .prepare(
            "SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' \
             AND name NOT LIKE 'memories_fts_%' AND name NOT LIKE 'sqlite_autoindex%'",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let mut missing = Vec::new();
    for (kind, name) in &objects {
        if !doc.contains(&format!("`{name}")) {
            missing.push(format!("{kind} {name}"));
        }
        if kind != "table" || name == "memories_fts" {
            continue;
        }
        let cols: Vec<String> = c
            .prepare(&format!("SELECT name FROM pragma_table_info('{name}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for col in cols {
            if col != "rowid"
                && !doc.contains(&format!("`{col}`"))
                && !doc.contains(&format!("{col}`"))
            {
                missing.push(format!("column {name}.{col}"));
            }
        }
    }
    assert!(objects.len() > 8, "{objects:?}");
    assert!(
        missing.is_empty(),
        "docs/schema.md does not name: {missing:?}"
    );
}

/// A stored value that cannot be read back is an error naming it, never a
/// default (a time out of range used to read as 1970); SQLite's own errors
/// travel as the source of a storage error.
#[test]
fn corrupt_rows_are_errors_not_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = SqliteStore::open(&path, Default::default()).unwrap();
    let m = mem("project/a", "soon corrupt");
    s.put(&m).unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE memories SET created_at = ?", [i64::MAX])
        .unwrap();
    let err = s.get(&m.id).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(err.class(), strata::ErrorClass::Storage);
    c.execute(
        "UPDATE memories SET created_at = 0, scope = 'not a scope'",
        [],
    )
    .unwrap();
    let err = s.get(&m.id).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("not a scope"), "{err}");
    c.execute_batch("DROP TABLE history").unwrap();
    let err = s.history(&m.id).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Storage {
                backend: "sqlite",
                ..
            }
        ),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}
