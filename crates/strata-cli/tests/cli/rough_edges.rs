//! The first hour's smaller stumbles (issue 56, item 10), each through the
//! real binary on a real SQLite file: a `.memory/` file outside the named
//! folders, an error's cause said twice, a backup imported twice, `--db` in
//! a folder that does not exist, one chat export given as the other, and
//! ChatGPT's tool turns.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::util::{Env, write};

/// A fixture of `tests/fixtures/import/`.
fn fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn sync_reads_every_file_under_dot_memory() {
    let e = Env::new();
    let d = e.path("repo");
    std::fs::create_dir_all(d.join(".memory/project/decisions")).unwrap();
    std::fs::create_dir_all(d.join(".memory/notes")).unwrap();
    std::fs::create_dir_all(d.join(".memory/decisions")).unwrap();
    write(&d.join(".memory/testing.md"), "Run the tests with ./check.");
    write(&d.join(".memory/notes/ci.md"), "CI runs on two cores.");
    write(&d.join(".memory/decisions/db.md"), "Use SQLite.");
    write(
        &d.join(".memory/project/decisions/api.md"),
        "REST first, MCP beside it.",
    );
    let r = e.json(&["sync", d.to_str().unwrap(), "--project", "acme"]);
    assert_eq!(r["added"].as_array().unwrap().len(), 4, "{r}");
    assert_eq!(r["skipped"], json!([]), "{r}");
    let ms = e.json(&["list", "--view", "project/acme", "--limit", "100"]);
    let kind_of = |key: &str| {
        let m = ms
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["key"] == key)
            .unwrap_or_else(|| panic!("no memory keyed {key} in {ms}"));
        m["kind"].as_str().unwrap().to_string()
    };
    assert_eq!(kind_of(".memory/testing.md"), "context");
    assert_eq!(kind_of(".memory/notes/ci.md"), "context");
    assert_eq!(kind_of(".memory/decisions/db.md"), "decision");
    assert_eq!(kind_of(".memory/project/decisions/api.md"), "decision");
}

#[test]
fn a_missing_file_is_named_with_its_cause_once() {
    let e = Env::new();
    for args in [
        &["import", "/nonexistent.jsonl"][..],
        &["import", "--from", "chatgpt", "/nonexistent.json"],
        &["import", "--from", "claude", "/nonexistent.json"],
        &["sync", "/nonexistent"],
    ] {
        let err = e.fails(args, 1);
        assert!(err.contains("/nonexistent"), "{args:?}: {err}");
        assert_eq!(
            err.matches("No such file or directory").count(),
            1,
            "{args:?}: {err}"
        );
    }
}

#[cfg(feature = "postgres")]
#[test]
fn an_absent_postgres_server_is_named_once() {
    let e = Env::new();
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let err = e.fails(&["--db", "postgres://strata@127.0.0.1:1/x", "stats"], 1);
    assert_eq!(err.matches("onnection refused").count(), 1, "{err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");
}

#[test]
fn importing_a_backup_into_the_store_that_holds_it_names_on_conflict_skip() {
    let e = Env::new();
    e.remember("Deploys happen on Tuesdays", "project/acme", &[]);
    let backup = e.ok(&["export"]);
    write(&e.path("backup.jsonl"), &backup);
    let before = e.snapshot();
    let err = e.fails(&["import", "backup.jsonl"], 1);
    assert!(err.contains("already exists"), "{err}");
    assert!(err.contains("--on-conflict skip"), "{err}");
    assert_eq!(e.snapshot(), before);
    // The hint works as said.
    let r = e.json(&["import", "backup.jsonl", "--on-conflict", "skip"]);
    assert_eq!(
        (r["imported"].as_u64(), r["skipped"].as_u64()),
        (Some(0), Some(1))
    );
    // The JSON error keeps its code.
    let o = e.run(&["import", "backup.jsonl", "--json"]);
    let v: Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(v["error"]["code"], "conflict", "{v}");
}

#[test]
fn a_db_in_a_missing_folder_is_refused_and_nothing_is_created() {
    let e = Env::new();
    let db = e.path("no/such/dir/x.db");
    let err = e.fails(&["--db", db.to_str().unwrap(), "stats"], 2);
    assert!(err.contains("--db"), "{err}");
    assert!(
        err.contains(&e.path("no/such/dir").display().to_string()),
        "{err}"
    );
    assert!(!e.path("no").exists(), "a folder was created");
    // The same path from STRATA_DB is named as such.
    let o = e.cmd().env("STRATA_DB", &db).arg("stats").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("STRATA_DB"), "{err}");
    assert!(!e.path("no").exists(), "a folder was created");
    // The default database's folder is still made on first use.
    let o = e
        .cmd()
        .env_remove("STRATA_DB")
        .arg("stats")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(e.path("data/strata/strata.db").is_file());
}

#[test]
fn one_chat_export_given_as_the_other_names_the_right_from() {
    let e = Env::new();
    let err = e.fails(
        &[
            "import",
            "--from",
            "chatgpt",
            &fixture("claude/conversations.json"),
        ],
        1,
    );
    assert!(err.contains("--from claude"), "{err}");
    let err = e.fails(
        &[
            "import",
            "--from",
            "claude",
            &fixture("chatgpt/conversations.json"),
        ],
        1,
    );
    assert!(err.contains("--from chatgpt"), "{err}");
    assert_eq!(e.json(&["stats"])["memories"], 0, "a refused import wrote");
}

#[test]
fn chatgpt_tool_turns_are_imported_as_tool_output() {
    let e = Env::new();
    let node = |id: &str, parent: Option<&str>, role: &str, text: &str, t: f64| {
        json!({"id": id, "parent": parent, "children": [], "message": {
            "id": id, "author": {"role": role}, "create_time": t,
            "content": {"content_type": "text", "parts": [text]}}})
    };
    let conv = json!([{
        "id": "c1", "title": "Disk use", "create_time": 1717236000.0, "current_node": "m3",
        "mapping": {
            "m1": node("m1", None, "user", "How full is the disk?", 1717236001.0),
            "m2": node("m2", Some("m1"), "tool", "Filesystem /dev/sda1 91% used", 1717236002.0),
            "m3": node("m3", Some("m2"), "assistant", "The disk is 91% full.", 1717236003.0),
        }
    }]);
    write(&e.path("conversations.json"), &conv.to_string());
    let r = e.json(&["import", "--from", "chatgpt", "conversations.json"]);
    assert_eq!(r["added"], 3, "{r}");
    let ms = e.json(&["list", "--view", "session/chatgpt-c1", "--limit", "10"]);
    let got: Vec<(String, String)> = ms
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        got.contains(&("tool".into(), "tool_output".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("user".into(), "conversation".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("assistant".into(), "conversation".into())),
        "{got:?}"
    );
}
