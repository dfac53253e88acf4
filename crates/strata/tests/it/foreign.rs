//! Other tools' memories (`Engine::import_foreign`) on every backend: a
//! conversation becomes a session in its own scope, a second import adds
//! nothing, and an import that breaks a session's bound writes nothing. A
//! basic-memory note becomes a memory per observation and per relation, and
//! an edited one adds only what changed; an Obsidian note stays whole.

use std::path::Path;

use strata::{ForeignFormat, ForeignImport, Memory, View};

use crate::harness::{MakeEngine, fingerprint, scope};

backends!(
    engine: conversations_import_once_into_sessions,
    a_refused_import_writes_nothing,
    a_basic_memory_note_imports_per_observation_and_relation,
    an_edited_observation_adds_only_itself,
    an_obsidian_note_stays_one_memory,
    bad_observation_lines_are_reported_and_kept,
);

const CLAUDE: &str = r#"[{"uuid": "c-1", "name": "Deploys", "created_at": "2024-06-03T08:15:00Z",
  "chat_messages": [
    {"uuid": "m-1", "sender": "human", "text": "When do we deploy?", "created_at": "2024-06-03T08:15:02Z"},
    {"uuid": "m-2", "sender": "assistant", "text": "On Tuesdays.", "created_at": "2024-06-03T08:15:09Z"}]}]"#;

fn claude_import(dir: &std::path::Path, dry_run: bool) -> ForeignImport {
    let path = dir.join("conversations.json");
    std::fs::write(&path, CLAUDE).unwrap();
    ForeignImport {
        format: ForeignFormat::Claude,
        input: strata::ForeignInput::Path(path),
        scope: None,
        dry_run,
    }
}

fn conversations_import_once_into_sessions(make: MakeEngine) {
    let e = make(&|_| {});
    let dir = tempfile::tempdir().unwrap();
    let dry = e.import_foreign(&claude_import(dir.path(), true)).unwrap();
    assert_eq!((dry.added, dry.sessions, dry.dry_run), (2, 1, true));
    assert!(
        e.list_sessions().unwrap().is_empty(),
        "a dry run writes nothing"
    );
    let r = e.import_foreign(&claude_import(dir.path(), false)).unwrap();
    assert_eq!(
        (r.added, r.sessions, r.scopes.clone()),
        (2, 1, vec!["session/claude-c-1".to_string()])
    );
    let s = e.list_sessions().unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].id.as_str(), s[0].scope.clone()),
        ("claude-c-1", scope("session/claude-c-1"))
    );
    let mut list = strata::List::new(View::scope(scope("session/claude-c-1")));
    list.limit = 10;
    let turns = e.list(&list).unwrap();
    assert_eq!(turns.len(), 2);
    assert!(
        turns
            .iter()
            .all(|m| m.session.as_deref() == Some("claude-c-1"))
    );
    let before = fingerprint(&e);
    let again = e.import_foreign(&claude_import(dir.path(), false)).unwrap();
    assert_eq!((again.added, again.unchanged, again.sessions), (0, 2, 0));
    assert_eq!(fingerprint(&e), before);
}

fn a_refused_import_writes_nothing(make: MakeEngine) {
    let e = make(&|c| c.session_max_bytes = 20);
    let dir = tempfile::tempdir().unwrap();
    let before = fingerprint(&e);
    let err = e
        .import_foreign(&claude_import(dir.path(), false))
        .unwrap_err();
    assert!(err.to_string().contains("claude-c-1"), "{err}");
    assert_eq!(fingerprint(&e), before);
}

/// A basic-memory note: prose, observations (one with tags and a context,
/// one whose category is a kind word), relations, and a task that is
/// neither.
const COFFEE: &str = "---
title: Coffee Brewing
type: note
permalink: coffee-brewing
tags: [coffee]
created: 2024-05-02T09:00:00Z
---
# Coffee Brewing

We brew for the office every morning, see [[Office Kitchen]].

- [ ] buy filters

## Observations
- [method] Pour over gives more clarity than French press
- [technique] Water at 205F extracts best #brewing #temperature (from the barista course)
- [decision] We buy whole beans only

## Relations
- relates_to [[Coffee Bean Origins]]
- requires [[Proper Grinding]] (a burr grinder)
";

fn markdown_import(dir: &Path) -> ForeignImport {
    ForeignImport {
        format: ForeignFormat::Markdown,
        input: strata::ForeignInput::Path(dir.to_path_buf()),
        scope: Some(scope("project/kb")),
        dry_run: false,
    }
}

fn in_kb(e: &strata::Engine) -> Vec<Memory> {
    let mut list = strata::List::new(View::scope(scope("project/kb")));
    list.limit = 100;
    e.list(&list).unwrap()
}

fn with<'a>(ms: &'a [Memory], text: &str) -> &'a Memory {
    ms.iter()
        .find(|m| m.content.contains(text))
        .unwrap_or_else(|| panic!("no memory with `{text}`"))
}

fn a_basic_memory_note_imports_per_observation_and_relation(make: MakeEngine) {
    let e = make(&|_| {});
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("coffee.md"), COFFEE).unwrap();
    let r = e.import_foreign(&markdown_import(dir.path())).unwrap();
    assert_eq!((r.added, r.unchanged), (6, 0), "{r:?}");
    assert!(r.skipped.is_empty(), "{r:?}");
    let ms = in_kb(&e);
    assert_eq!(ms.len(), 6);

    // The note's prose, without the lines that became memories of their own.
    let note = with(&ms, "every morning");
    assert_eq!(
        note.content,
        "# Coffee Brewing\n\nWe brew for the office every morning, see [[Office Kitchen]].\n\n- [ ] buy filters"
    );
    assert_eq!(note.key.as_deref(), Some("coffee-brewing"));
    assert_eq!(note.tags, ["markdown", "coffee"]);
    let p = note.payload.as_ref().unwrap();
    assert_eq!(p["links"], serde_json::json!(["Office Kitchen"]));

    let t = with(&ms, "205F");
    assert_eq!(
        t.content,
        "Coffee Brewing: Water at 205F extracts best #brewing #temperature (from the barista course)"
    );
    assert_eq!(t.kind.as_str(), "technique");
    assert_eq!(t.tags, ["markdown", "technique", "brewing", "temperature"]);
    let p = t.payload.as_ref().unwrap();
    assert_eq!(
        (p["category"].as_str(), p["context"].as_str()),
        (Some("technique"), Some("from the barista course"))
    );
    assert_eq!(
        (
            p["path"].as_str(),
            p["permalink"].as_str(),
            p["title"].as_str()
        ),
        (
            Some("coffee.md"),
            Some("coffee-brewing"),
            Some("Coffee Brewing")
        )
    );
    assert_eq!(t.created_at.to_string(), "2024-05-02T09:00:00Z");
    assert_eq!(t.key, None);
    assert_eq!(
        with(&ms, "whole beans").kind,
        strata::Kind::Decision,
        "a category that is a kind word is the kind"
    );
    assert_eq!(
        with(&ms, "Pour over").content,
        "Coffee Brewing: Pour over gives more clarity than French press"
    );

    let rel = with(&ms, "requires");
    assert_eq!(rel.content, "Coffee Brewing requires Proper Grinding");
    assert_eq!(rel.kind.as_str(), "fact");
    assert_eq!(rel.tags, ["markdown"]);
    let p = rel.payload.as_ref().unwrap();
    assert_eq!(
        (
            p["from"].as_str(),
            p["to"].as_str(),
            p["relation_type"].as_str(),
            p["context"].as_str()
        ),
        (
            Some("Coffee Brewing"),
            Some("Proper Grinding"),
            Some("requires"),
            Some("a burr grinder")
        )
    );
    assert_eq!(
        with(&ms, "relates_to").content,
        "Coffee Brewing relates_to Coffee Bean Origins"
    );

    // The same folder again adds nothing.
    let before = fingerprint(&e);
    let again = e.import_foreign(&markdown_import(dir.path())).unwrap();
    assert_eq!((again.added, again.unchanged), (0, 6), "{again:?}");
    assert!(again.skipped.is_empty(), "{again:?}");
    assert_eq!(fingerprint(&e), before);
}

fn an_edited_observation_adds_only_itself(make: MakeEngine) {
    let e = make(&|_| {});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("coffee.md");
    std::fs::write(&path, COFFEE).unwrap();
    e.import_foreign(&markdown_import(dir.path())).unwrap();
    std::fs::write(
        &path,
        COFFEE.replace(
            "We buy whole beans only",
            "We buy whole beans, roasted this month",
        ) + "- [tip] Rinse the paper filter first\n",
    )
    .unwrap();
    let r = e.import_foreign(&markdown_import(dir.path())).unwrap();
    assert_eq!((r.added, r.unchanged), (2, 5), "{r:?}");
    assert!(r.skipped.is_empty(), "the prose did not change: {r:?}");
    let ms = in_kb(&e);
    assert_eq!(ms.len(), 8, "the old observation is kept");
    assert!(with(&ms, "roasted this month").kind == strata::Kind::Decision);
    assert_eq!(
        with(&ms, "Rinse the paper").content,
        "Coffee Brewing: Rinse the paper filter first"
    );
}

fn an_obsidian_note_stays_one_memory(make: MakeEngine) {
    let e = make(&|_| {});
    let dir = tempfile::tempdir().unwrap();
    let text = "---\ntags: [ops]\n---\n# Runbook\n\n- [ ] rotate keys\n- [x] renew cert\n\
                - see [[Billing DB]]\n- #urgent restart the worker\n- [link](https://example.com) docs\n\n\
                ```\n- [fake] inside a code block\n```\n";
    std::fs::write(dir.path().join("Runbook.md"), text).unwrap();
    let r = e.import_foreign(&markdown_import(dir.path())).unwrap();
    assert_eq!(r.added, 1, "{r:?}");
    assert!(r.skipped.is_empty(), "{r:?}");
    let ms = in_kb(&e);
    assert_eq!(ms.len(), 1);
    let body = text
        .split_once("---\n")
        .unwrap()
        .1
        .split_once("---\n")
        .unwrap()
        .1;
    assert_eq!(ms[0].content, body.trim(), "the whole body, as before");
    assert_eq!(ms[0].kind, strata::Kind::Note);
    assert_eq!(ms[0].key.as_deref(), Some("Runbook.md"));
    assert_eq!(
        ms[0].payload.as_ref().unwrap()["links"],
        serde_json::json!(["Billing DB"])
    );
}

fn bad_observation_lines_are_reported_and_kept(make: MakeEngine) {
    let e = make(&|_| {});
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("people")).unwrap();
    std::fs::write(
        dir.path().join("people/ana.md"),
        "---\ntitle: Ana\ntype: person\n---\n## Observations\n- [] no category\n\
         - [role] Leads billing\n- [fact]\n- [fact] (only a context)\n- knows [[]]\n",
    )
    .unwrap();
    let r = e.import_foreign(&markdown_import(dir.path())).unwrap();
    let skipped: Vec<(&str, &str)> = r
        .skipped
        .iter()
        .map(|s| (s.entry.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(skipped.len(), 4, "{r:?}");
    for (entry, why) in [
        ("people/ana.md line 6", "empty category"),
        ("people/ana.md line 8", "`[fact]` with no content"),
        ("people/ana.md line 9", "`[fact]` with no content"),
        ("people/ana.md line 10", "names nothing"),
    ] {
        assert!(
            skipped
                .iter()
                .any(|(e, r)| *e == entry && r.contains(why) && r.contains("left in the note")),
            "{entry}: {skipped:?}"
        );
    }
    assert_eq!(
        r.added, 2,
        "the observation and the note's other lines: {r:?}"
    );
    let ms = in_kb(&e);
    assert_eq!(
        with(&ms, "Leads billing").content,
        "Ana (person): Leads billing"
    );
    let rest = with(&ms, "no category");
    assert_eq!(
        rest.content,
        "# Ana\n\n## Observations\n- [] no category\n- [fact]\n- [fact] (only a context)\n- knows [[]]"
    );
}
