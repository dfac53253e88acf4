//! Other tools' memories (`Engine::import_foreign`) on every backend: a
//! conversation becomes a session in its own scope, a second import adds
//! nothing, and an import that breaks a session's bound writes nothing.

use strata::{ForeignFormat, ForeignImport, View};

use crate::harness::{MakeEngine, fingerprint, scope};

backends!(engine: conversations_import_once_into_sessions, a_refused_import_writes_nothing);

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
