//! `strata import --from FORMAT`: the fixtures under `tests/fixtures/import/`
//! (one per format docs/formats.md describes) imported by the real binary
//! into a real SQLite file — where each lands, its times, importing twice,
//! dry runs, and bad inputs that change nothing. Then `strata completions`
//! and `strata man`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{Env, write};

/// A fixture's path.
fn fixture(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(rel);
    p.to_string_lossy().into_owned()
}

/// Copies a fixture folder into the test's directory (to edit it).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Every memory in `view`.
fn listed(e: &Env, view: &str) -> Vec<Value> {
    let v = e.json(&["list", "--view", view, "--limit", "1000"]);
    v.as_array().unwrap().clone()
}

/// The memory whose content contains `text`.
fn with<'a>(ms: &'a [Value], text: &str) -> &'a Value {
    ms.iter()
        .find(|m| m["content"].as_str().unwrap().contains(text))
        .unwrap_or_else(|| panic!("no memory with `{text}` in {ms:?}"))
}

/// Imports `file` as `format` (with `extra` flags), then again, and
/// checks that the second import adds nothing; returns the first report.
fn import_twice(e: &Env, format: &str, file: &str, extra: &[&str]) -> Value {
    let mut args = vec!["import", "--from", format, file];
    args.extend_from_slice(extra);
    let first = e.json(&args);
    let before = e.snapshot();
    let again = e.json(&args);
    assert_eq!(again["added"], 0, "{again}");
    assert_eq!(again["unchanged"], first["added"], "{again}");
    assert_eq!(e.snapshot(), before, "a second import changed the store");
    first
}

#[test]
fn mcp_memory_observations_and_relations_land_in_global_once() {
    let e = Env::new();
    let r = import_twice(&e, "mcp-memory", &fixture("memory.json"), &[]);
    assert_eq!(r["added"], 7, "{r}");
    assert_eq!(r["scopes"], serde_json::json!(["global"]));
    let skipped = r["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{r}");
    assert_eq!(skipped[0]["entry"], "line 3");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("Lisbon_Office")
    );
    let ms = listed(&e, "global");
    assert_eq!(ms.len(), 7);
    let obs = with(&ms, "Prefers short answers");
    assert_eq!(obs["content"], "Ana_Lima (person): Prefers short answers");
    assert_eq!(obs["kind"], "fact");
    assert_eq!(obs["payload"]["entity"], "Ana_Lima");
    assert_eq!(obs["tags"], serde_json::json!(["mcp-memory"]));
    let rel = with(&ms, "works_at");
    assert_eq!(rel["content"], "Ana_Lima works_at Lisbon_Office");
    assert_eq!(rel["payload"]["relation_type"], "works_at");
}

#[test]
fn an_entity_that_grew_adds_only_its_new_observations() {
    let e = Env::new();
    let file = e.path("memory.json");
    std::fs::copy(fixture("memory.json"), &file).unwrap();
    e.json(&["import", "--from", "mcp-memory", file.to_str().unwrap()]);
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "\"Works from Lisbon\"",
        "\"Works from Lisbon\",\"Speaks Portuguese\"",
    );
    write(&file, &text);
    let r = e.json(&["import", "--from", "mcp-memory", file.to_str().unwrap()]);
    assert_eq!(
        (r["added"].as_u64(), r["unchanged"].as_u64()),
        (Some(1), Some(7)),
        "{r}"
    );
}

#[test]
fn chatgpt_conversations_become_sessions_with_the_branch_shown_and_its_times() {
    let e = Env::new();
    let r = import_twice(&e, "chatgpt", &fixture("chatgpt/conversations.json"), &[]);
    assert_eq!(
        (r["added"].as_u64(), r["sessions"].as_u64()),
        (Some(5), Some(2)),
        "{r}"
    );
    let reasons: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons.len(), 2, "{r}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("no text (system message)"))
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("not on the branch shown"))
    );
    let session = "chatgpt-6659f1a0-0c2e-8000-9a6f-1b2c3d4e5f60";
    let ms = listed(&e, &format!("session/{session}"));
    assert_eq!(ms.len(), 4);
    assert!(
        ms.iter()
            .all(|m| !m["content"].as_str().unwrap().contains("MongoDB"))
    );
    let q = with(&ms, "Which database");
    assert_eq!(
        (
            q["kind"].as_str(),
            q["role"].as_str(),
            q["session"].as_str()
        ),
        (Some("conversation"), Some("user"), Some(session))
    );
    assert_eq!(q["created_at"], "2024-06-01T10:00:10Z");
    assert_eq!(
        q["payload"]["conversation"]["title"],
        "Invoice database choice"
    );
    let a = with(&ms, "02:00");
    assert_eq!(a["content"], "Run it at 02:00, \ninside one transaction.");
    assert_eq!(a["role"], "assistant");
    let shown = e.json(&["session", "show", session]);
    assert_eq!(shown["memories"], 4, "{shown}");
}

#[test]
fn claude_conversations_keep_senders_text_blocks_and_times() {
    let e = Env::new();
    let r = import_twice(&e, "claude", &fixture("claude/conversations.json"), &[]);
    assert_eq!(
        (r["added"].as_u64(), r["sessions"].as_u64()),
        (Some(2), Some(1)),
        "{r}"
    );
    assert_eq!(r["skipped"][0]["entry"], "conversation 1 message 3");
    let ms = listed(&e, "session/claude-4b1f5a52-2d8e-4c1a-9f3b-7e6d5c4b3a21");
    let q = with(&ms, "When do we deploy");
    assert_eq!(
        (q["role"].as_str(), q["created_at"].as_str()),
        (Some("user"), Some("2024-06-03T08:15:02.118Z"))
    );
    let a = with(&ms, "Tuesdays");
    assert_eq!(a["role"], "assistant");
}

#[test]
fn a_markdown_folder_keeps_front_matter_links_and_times() {
    let e = Env::new();
    let dir = fixture("notes");
    let r = import_twice(&e, "markdown", &dir, &["--scope", "project/acme"]);
    assert_eq!(r["added"], 3, "{r}");
    let skipped: Vec<(&str, &str)> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["entry"].as_str().unwrap(), s["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(skipped.len(), 2, "{r}");
    assert!(
        skipped
            .iter()
            .any(|(e, r)| *e == "board.png" && r.contains("not a Markdown file"))
    );
    assert!(
        skipped
            .iter()
            .any(|(e, r)| *e == "inbox.md" && r.contains("no text"))
    );
    let ms = listed(&e, "project/acme");
    assert_eq!(ms.len(), 3, "the .obsidian folder is not read");
    let db = with(&ms, "multi-row transactions");
    assert_eq!(db["key"], "decisions/billing-database");
    assert_eq!(db["kind"], "decision");
    assert_eq!(
        db["tags"],
        serde_json::json!(["markdown", "billing", "database"])
    );
    assert_eq!(db["created_at"], "2024-05-02T09:00:00Z");
    assert_eq!(db["updated_at"], "2024-05-20T16:30:00Z");
    assert_eq!(
        db["payload"]["links"],
        serde_json::json!(["people/Ana Lima", "Reconciliation"])
    );
    assert!(
        db["content"]
            .as_str()
            .unwrap()
            .starts_with("# Billing database\n\nWe chose")
    );
    let rec = with(&ms, "nightly reconciliation");
    assert_eq!(rec["key"], "Reconciliation.md");
    assert_eq!(
        rec["tags"],
        serde_json::json!(["markdown", "billing", "ops", "nightly"])
    );
    assert_eq!(rec["created_at"], "2024-05-10T00:00:00Z");
    assert!(
        rec["content"]
            .as_str()
            .unwrap()
            .starts_with("# Reconciliation\n"),
        "no second heading"
    );
    let ana = with(&ms, "Leads the billing team");
    assert_eq!(
        (ana["key"].as_str(), ana["kind"].as_str()),
        (Some("people/Ana Lima.md"), Some("note"))
    );
    assert_eq!(ana["payload"]["type"], "Team Lead");
}

#[test]
fn a_markdown_folder_goes_to_its_project_by_default_and_an_edit_is_kept_apart() {
    let e = Env::new();
    copy_dir(Path::new(&fixture("notes")), &e.path("vault"));
    let r = e.json(&["import", "--from", "markdown", "vault", "--dry-run"]);
    assert_eq!(
        (r["added"].as_u64(), r["dry_run"].as_bool()),
        (Some(3), Some(true)),
        "{r}"
    );
    assert_eq!(r["scopes"], serde_json::json!(["project/vault"]));
    e.json(&["import", "--from", "markdown", "vault"]);
    write(
        &e.path("vault/Reconciliation.md"),
        "# Reconciliation\n\nNow at 03:00.\n",
    );
    let r = e.json(&["import", "--from", "markdown", "vault"]);
    assert_eq!(
        (r["added"].as_u64(), r["unchanged"].as_u64()),
        (Some(0), Some(2)),
        "{r}"
    );
    let changed = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["entry"] == "Reconciliation.md")
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        changed["reason"]
            .as_str()
            .unwrap()
            .contains("changed since it was imported")
    );
    let ms = listed(&e, "project/vault");
    assert!(
        with(&ms, "nightly reconciliation")["content"]
            .as_str()
            .unwrap()
            .contains("02:00")
    );
    // The same notes under another folder name land in another project.
    let r = e.json(&["import", "--from", "markdown", &fixture("notes")]);
    assert_eq!(r["added"], 3, "{r}");
    assert_eq!(r["scopes"], serde_json::json!(["project/notes"]));
}

#[test]
fn mem0_memories_land_in_their_user_and_agent_scopes() {
    let e = Env::new();
    let r = import_twice(&e, "mem0", &fixture("mem0.json"), &[]);
    assert_eq!(r["added"], 3, "{r}");
    assert_eq!(
        r["scopes"],
        serde_json::json!([
            "agent/billing-bot",
            "user/ana-example.com",
            "user/ana-example.com/agent/billing-bot"
        ])
    );
    let ms = listed(&e, "user/**");
    let p = with(&ms, "Prefers short answers");
    assert_eq!(p["scope"], "user/ana-example.com");
    assert_eq!(p["created_at"], "2024-07-20T08:24:33.213Z");
    assert_eq!(p["updated_at"], "2024-07-21T17:00:00Z");
    assert_eq!(p["tags"], serde_json::json!(["mem0", "preferences"]));
    assert_eq!(p["payload"]["user_id"], "ana@example.com");
    assert_eq!(p["payload"]["metadata"]["source"], "chat");
    let r = e.json(&[
        "import",
        "--from",
        "mem0",
        &fixture("mem0.json"),
        "--scope",
        "project/acme",
    ]);
    assert_eq!(r["added"], 3, "another target is another copy: {r}");
    assert_eq!(listed(&e, "project/acme").len(), 3);
}

#[test]
fn a_dry_run_reports_what_an_import_does_and_writes_nothing() {
    let e = Env::new();
    e.remember("already here", "project/acme", &[]);
    let before = e.snapshot();
    let dry = e.json(&[
        "import",
        "--from",
        "chatgpt",
        &fixture("chatgpt/conversations.json"),
        "--dry-run",
    ]);
    assert_eq!(e.snapshot(), before);
    let out = e.ok(&[
        "import",
        "--from",
        "chatgpt",
        &fixture("chatgpt/conversations.json"),
        "--dry-run",
    ]);
    assert!(
        out.contains("would add 5 memories in 2 new sessions"),
        "{out}"
    );
    assert!(
        out.contains("skipped conversation 1 message a1-old"),
        "{out}"
    );
    assert_eq!(e.snapshot(), before);
    let real = e.json(&[
        "import",
        "--from",
        "chatgpt",
        &fixture("chatgpt/conversations.json"),
    ]);
    assert_eq!(real["added"], dry["added"]);
    assert_eq!(real["sessions"], dry["sessions"]);
    assert_eq!(real["skipped"], dry["skipped"]);
}

/// `strata import --from FORMAT FILE` with FILE holding `text` fails (exit
/// 1) naming each of `names`, and the store is as it was.
fn refused(e: &Env, format: &str, text: &str, names: &[&str]) {
    let file = e.path("input.json");
    write(&file, text);
    let before = e.snapshot();
    let err = e.fails(&["import", "--from", format, file.to_str().unwrap()], 1);
    for n in names {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
    assert_eq!(e.snapshot(), before, "a refused import wrote something");
}

#[test]
fn bad_inputs_are_named_and_change_nothing() {
    let e = Env::new();
    e.remember("already here", "project/acme", &[]);
    let chatgpt = std::fs::read_to_string(fixture("chatgpt/conversations.json")).unwrap();
    refused(
        &e,
        "chatgpt",
        &chatgpt[..chatgpt.len() / 2],
        &["input.json", "not valid JSON", "line", "column"],
    );
    let claude = std::fs::read_to_string(fixture("claude/conversations.json")).unwrap();
    refused(
        &e,
        "chatgpt",
        &claude,
        &[
            "input.json: conversation 1",
            "not `mapping`",
            "`--from claude`",
        ],
    );
    // The first conversation is good; the second's message lacks a sender.
    let two = format!(
        "[{}, {{\"uuid\": \"c2\", \"name\": \"x\", \"chat_messages\": [{{\"uuid\": \"m\", \"text\": \"hi\"}}]}}]",
        claude.trim().trim_start_matches('[').trim_end_matches(']')
    );
    refused(
        &e,
        "claude",
        &two,
        &["conversation 2 message 1", "`sender` is missing"],
    );
    refused(
        &e,
        "claude",
        "{\"uuid\": \"x\"}",
        &["expected a JSON array of conversations"],
    );
    refused(
        &e,
        "claude",
        r#"[{"uuid": "c", "chat_messages": [{"uuid": "m", "sender": "human", "text": "hi", "created_at": "last week"}]}]"#,
        &["conversation 1 message 1", "`created_at`", "last week"],
    );
    let mcp = std::fs::read_to_string(fixture("memory.json")).unwrap();
    refused(
        &e,
        "mcp-memory",
        &format!("{mcp}{{\"type\":\"node\",\"name\":\"x\"}}\n"),
        &["line 6", "`type`: `node`"],
    );
    refused(
        &e,
        "mcp-memory",
        "{\"type\":\"relation\",\"from\":\"a\",\"to\":\"b\"}\n",
        &["line 1", "`relationType` is missing"],
    );
    refused(
        &e,
        "mcp-memory",
        "{\"type\":\"entity\",\"name\":\"a\",\"entityType\":\"t\",\"observations\":[\"ok\",\n",
        &["line 1", "invalid JSON"],
    );
    refused(
        &e,
        "mem0",
        r#"{"results": [{"id": "m1"}]}"#,
        &["memory 1", "`memory` is missing"],
    );
    refused(
        &e,
        "mem0",
        r#"{"memories": []}"#,
        &["expected `{\"results\": [...]}`"],
    );
    refused(
        &e,
        "mem0",
        r#"[{"id": "m1", "memory": "x", "created_at": "2999-01-01T00:00:00Z"}]"#,
        &["memory 1", "in the future"],
    );
    let notes = e.path("notes");
    std::fs::create_dir(&notes).unwrap();
    write(&notes.join("good.md"), "A good note.\n");
    write(&notes.join("bad.md"), "---\ntags: [unclosed\n---\nBody\n");
    let before = e.snapshot();
    let err = e.fails(&["import", "--from", "markdown", "notes"], 1);
    assert!(err.contains("bad.md: front matter: invalid YAML"), "{err}");
    assert_eq!(e.snapshot(), before);
    let err = e.fails(
        &["import", "--from", "markdown", &fixture("memory.json")],
        1,
    );
    assert!(err.contains("is not a folder"), "{err}");
}

#[test]
fn import_flags_are_checked_before_anything_is_read() {
    let e = Env::new();
    let err = e.fails(&["import", "--from", "evernote", "x.json"], 2);
    assert!(
        err.contains("evernote") && err.contains("mcp-memory, chatgpt, claude, markdown, mem0"),
        "{err}"
    );
    let err = e.fails(&["import", "x.jsonl", "--dry-run"], 2);
    assert!(err.contains("--from"), "{err}");
    let err = e.fails(&["import", "--from", "mem0", "-"], 2);
    assert!(err.contains("not standard input"), "{err}");
    let err = e.fails(
        &[
            "import",
            "--from",
            "mem0",
            &fixture("mem0.json"),
            "--scope",
            "project//x",
        ],
        1,
    );
    assert!(err.contains("project//x"), "{err}");
    let err = e.fails(&["import", "--from", "mem0", "missing.json"], 1);
    assert!(err.contains("missing.json"), "{err}");
}

#[test]
fn completions_name_every_command_and_the_import_formats() {
    let e = Env::new();
    let bash = e.ok(&["completions", "bash"]);
    for word in ["import", "recall", "completions", "man", "mcp-memory"] {
        assert!(bash.contains(word), "bash completions lack `{word}`");
    }
    let script = e.path("strata.bash");
    write(&script, &bash);
    if let Ok(o) = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
    {
        assert!(
            o.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(e.ok(&["completions", "zsh"]).starts_with("#compdef strata"));
    assert!(
        e.ok(&["completions", "fish"])
            .contains("complete -c strata")
    );
    let err = e.fails(&["completions", "tcsh"], 2);
    assert!(
        err.contains("tcsh") && err.contains("bash, zsh, fish"),
        "{err}"
    );
    assert!(!e.db().exists(), "completions open no database");
}

#[test]
fn the_man_page_is_roff_with_every_command() {
    let e = Env::new();
    let man = e.ok(&["man"]);
    assert!(
        man.contains(".TH strata 1"),
        "{}",
        &man[..200.min(man.len())]
    );
    for word in ["import", "recall", "remember", "completions"] {
        assert!(man.contains(word), "the man page lacks `{word}`");
    }
    assert!(!e.db().exists(), "man opens no database");
}

#[test]
fn the_pages_examples_import_once() {
    let e = Env::new();
    for (format, name, added) in [
        ("mcp-memory", "import-mcp-memory", 3),
        ("chatgpt", "import-chatgpt", 2),
        ("claude", "import-claude", 2),
        ("markdown", "import-markdown", 1),
        ("markdown", "import-basic-memory", 4),
        ("mem0", "import-mem0", 1),
    ] {
        let text = crate::formats::example(name);
        let file = if format == "markdown" {
            std::fs::create_dir_all(e.path(name)).unwrap();
            write(&e.path(name).join("note.md"), &text);
            e.path(name)
        } else {
            write(&e.path(name), &text);
            e.path(name)
        };
        let r = import_twice(&e, format, file.to_str().unwrap(), &[]);
        assert_eq!(r["added"], added, "{name}: {r}");
        assert_eq!(r["skipped"], serde_json::json!([]), "{name}: {r}");
    }
}
