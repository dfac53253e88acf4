//! Memory files: sync into scopes, skip unchanged, update in place, forget
//! what is gone, and change nothing when a file is bad.

use strata::{ContextRequest, Kind, List, View};

use crate::harness::{MakeEngine, scope};

backends!(engine: files_sync_into_their_scopes);

fn files_sync_into_their_scopes(make: MakeEngine) {
    let e = make(&|c| {
        c.apply_toml(
            "[profiles.p]\nmax_tokens = 200\n[[profiles.p.sources]]\nlayer = \"project\"\nalways = [\"CLAUDE.md\"]\n",
            None,
        )
        .unwrap()
    });
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".memory/project/decisions")).unwrap();
    std::fs::create_dir_all(d.join(".memory/agent/coder")).unwrap();
    std::fs::write(d.join("CLAUDE.md"), "Keep functions short.").unwrap();
    std::fs::write(d.join(".memory/project/decisions/db.md"), "Use SQLite.").unwrap();
    std::fs::write(
        d.join(".memory/agent/coder/notes.txt"),
        "Prefers small diffs.",
    )
    .unwrap();
    std::fs::write(d.join(".memory/testing.md"), "Run ./check first.").unwrap();
    std::os::unix::fs::symlink(
        d.join("CLAUDE.md"),
        d.join(".memory/project/decisions/link.md"),
    )
    .unwrap();

    let r = e.sync_dir(d, "acme", false).unwrap();
    assert_eq!(r.added.len(), 4, "{r:?}");
    assert_eq!(r.skipped.len(), 1, "{r:?}");
    assert!(
        r.skipped
            .iter()
            .any(|(k, why)| k.ends_with("link.md") && why.contains("link"))
    );
    let all = |view: &str| {
        let mut l = List::new(View::parse(&[view]).unwrap());
        l.limit = 100;
        e.list(&l).unwrap()
    };
    let project = all("project/acme");
    assert_eq!(project.len(), 3);
    // A file right under `.memory/` is the project's (issue 56).
    let testing = project
        .iter()
        .find(|m| m.key.as_deref() == Some(".memory/testing.md"))
        .unwrap();
    assert_eq!(testing.kind, Kind::Context);
    let db = project.iter().find(|m| m.kind == Kind::Decision).unwrap();
    assert_eq!(db.key.as_deref(), Some(".memory/project/decisions/db.md"));
    assert!(db.pinned && db.tags.contains(&strata::FILE_TAG.to_string()));
    assert_eq!(all("project/acme/agent/coder").len(), 1);

    // Dry runs and unchanged files write nothing.
    std::fs::write(
        d.join(".memory/project/decisions/db.md"),
        "Use SQLite, WAL mode.",
    )
    .unwrap();
    let r = e.sync_dir(d, "acme", true).unwrap();
    assert_eq!(
        r.updated,
        vec![".memory/project/decisions/db.md".to_string()]
    );
    assert_eq!(e.get(&db.id).unwrap().unwrap().version, 1);
    let r = e.sync_dir(d, "acme", false).unwrap();
    assert_eq!((r.updated.len(), r.unchanged), (1, 3));
    let now = e.get(&db.id).unwrap().unwrap();
    assert_eq!(
        (now.version, now.content.as_str()),
        (2, "Use SQLite, WAL mode.")
    );

    // A bad file stops the sync before anything is written.
    std::fs::remove_file(d.join(".memory/agent/coder/notes.txt")).unwrap();
    std::fs::write(d.join(".memory/project/state.json"), "{not json").unwrap();
    let err = e.sync_dir(d, "acme", false).unwrap_err().to_string();
    assert!(err.contains(".memory/project/state.json"), "{err}");
    assert_eq!(all("project/acme/agent/coder").len(), 1);
    std::fs::remove_file(d.join(".memory/project/state.json")).unwrap();
    let r = e.sync_dir(d, "acme", false).unwrap();
    assert_eq!(r.removed, vec![".memory/agent/coder/notes.txt".to_string()]);
    assert!(all("project/acme/agent/coder").is_empty());

    // A profile loads CLAUDE.md first.
    for i in 0..20 {
        e.remember(strata::NewMemory::new(
            scope("project/acme"),
            format!("note {i}"),
        ))
        .unwrap();
    }
    let p = e
        .context(&ContextRequest::new("p").var("project", "acme"))
        .unwrap();
    assert_eq!(p.items[0].key.as_deref(), Some("CLAUDE.md"));
    assert!(e.sync_dir(&d.join("nope"), "acme", false).is_err());
    assert!(e.sync_dir(d, "a/b", false).is_err());
}
