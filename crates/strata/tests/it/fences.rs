//! Callers limited to scopes (a server's tokens) in the library: an import
//! or a session operation behind a [`Fence`] never changes or reveals a
//! memory or session outside it (issue 22: H1, M1, M2, L1), and sessions
//! hold only memories inside their scope.

use serde_json::{Value, json};
use strata::{Engine, Error, Export, Fence, NewMemory, OnConflict};

use crate::harness::{MakeEngine, fingerprint, scope, view};

fn alpha() -> Fence {
    Fence::within(vec![scope("project/alpha"), scope("global")])
}

/// `m` as an export line (one JSON object).
fn line_of(e: &Engine, id: &str) -> Value {
    let mut out = Vec::new();
    e.export(&Export::user_data(None, None), &mut out, &mut |_| {})
        .unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["id"] == id)
        .unwrap()
}

fn set_content(line: &mut Value, text: &str) {
    line["content"] = json!(text);
    line["checksum"] = json!(strata::checksum(text, None));
}

fn import_as(
    e: &Engine,
    fence: &Fence,
    lines: &[Value],
    mode: OnConflict,
) -> strata::Result<strata::ImportCounts> {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    e.import_within(&mut text.as_bytes(), mode, fence, &mut |_| {})
}

fn import_never_replaces_or_reveals_a_memory_outside_the_fence(make: MakeEngine) {
    let e = make(&|_| {});
    let theirs = e
        .remember(NewMemory::new(scope("project/beta"), "beta's secret plan"))
        .unwrap();
    let mine = e
        .remember(NewMemory::new(scope("project/alpha"), "alpha's note"))
        .unwrap();
    let template = line_of(&e, &mine.id);
    let their_before = line_of(&e, &theirs.id);
    for mode in [OnConflict::Error, OnConflict::Skip, OnConflict::Replace] {
        // A line naming beta's id, and one naming an id nobody holds: the
        // answers are the same.
        let mut onto_theirs = template.clone();
        onto_theirs["id"] = json!(theirs.id);
        set_content(&mut onto_theirs, &format!("alpha's takeover {mode:?}"));
        let mut fresh = template.clone();
        fresh["id"] = json!(uuid::Uuid::now_v7().to_string());
        set_content(&mut fresh, &format!("alpha's fresh line {mode:?}"));
        let a = import_as(&e, &alpha(), &[onto_theirs], mode).unwrap();
        let b = import_as(&e, &alpha(), &[fresh], mode).unwrap();
        assert_eq!(
            a, b,
            "{mode:?}: the answer must not tell that the id is taken"
        );
        assert_eq!(a.imported, 1);
        assert_eq!(
            line_of(&e, &theirs.id),
            their_before,
            "{mode:?}: beta's memory changed"
        );
        // Alpha's line is stored, under another id.
        let found = e
            .list(&strata::List::new(view(&["project/alpha"])))
            .unwrap()
            .into_iter()
            .find(|m| m.content == format!("alpha's takeover {mode:?}"))
            .expect("alpha's line is stored");
        assert_ne!(found.id, theirs.id);
    }
    // Alpha's own ids still conflict as before.
    let err = import_as(
        &e,
        &alpha(),
        std::slice::from_ref(&template),
        OnConflict::Error,
    )
    .unwrap_err();
    assert!(matches!(err, Error::DuplicateId(_)), "{err}");
    let r = import_as(&e, &alpha(), &[template], OnConflict::Replace).unwrap();
    assert_eq!(r.replaced, 1);
    // A line in a scope outside the fence is refused, naming its line.
    let mut outside = line_of(&e, &theirs.id);
    outside["id"] = json!(uuid::Uuid::now_v7().to_string());
    let before = fingerprint(&e);
    let err = import_as(&e, &alpha(), &[outside], OnConflict::Error).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidImport { line: 1, reason } if reason.contains("project/beta")),
        "{err}"
    );
    assert_eq!(fingerprint(&e), before);
}

fn a_fenced_import_writes_to_sessions_like_any_writer(make: MakeEngine) {
    let e = make(&|c| c.session_max_bytes = 100);
    e.create_session(Some("bs"), Some(scope("project/beta")), None)
        .unwrap();
    let mine = e
        .remember(NewMemory::new(scope("project/alpha"), "alpha's note"))
        .unwrap();
    let line = |session: &str, content: &str| {
        let mut l = line_of(&e, &mine.id);
        l["id"] = json!(uuid::Uuid::now_v7().to_string());
        l["session"] = json!(session);
        set_content(&mut l, content);
        l
    };
    let before = fingerprint(&e);
    // Another tenant's session.
    let err = import_as(
        &e,
        &alpha(),
        &[line("bs", "into beta's session")],
        OnConflict::Error,
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidImport { reason, .. } if reason.contains("session `bs`")),
        "{err}"
    );
    // Over the session's bound (one line, or several together).
    let err = import_as(
        &e,
        &alpha(),
        &[line("as", &"x".repeat(101))],
        OnConflict::Error,
    )
    .unwrap_err();
    assert!(matches!(err, Error::SessionFull { .. }), "{err}");
    let err = import_as(
        &e,
        &alpha(),
        &[line("as", &"x".repeat(60)), line("as", &"y".repeat(60))],
        OnConflict::Error,
    )
    .unwrap_err();
    assert!(matches!(err, Error::SessionFull { .. }), "{err}");
    assert_eq!(fingerprint(&e), before);
    // A session the import creates takes the line's scope and the bound.
    import_as(&e, &alpha(), &[line("as", "fits")], OnConflict::Error).unwrap();
    let s = e.store().get_session("as").unwrap().unwrap();
    assert_eq!(s.scope, scope("project/alpha"));
    assert_eq!(s.max_bytes, 100);
    assert_eq!(s.bytes, 4);
    // An archived session takes no more lines.
    e.archive_session("as").unwrap();
    let before = fingerprint(&e);
    let err = import_as(&e, &alpha(), &[line("as", "late")], OnConflict::Error).unwrap_err();
    assert!(matches!(err, Error::SessionArchived(_)), "{err}");
    assert_eq!(fingerprint(&e), before);
}

fn sessions_hold_only_memories_inside_their_scope(make: MakeEngine) {
    let e = make(&|_| {});
    // A write creates its session in its own scope.
    let m = e
        .remember(NewMemory::new(scope("project/beta"), "beta's decision").session("s"))
        .unwrap();
    assert_eq!(m.session.as_deref(), Some("s"));
    assert_eq!(
        e.store().get_session("s").unwrap().unwrap().scope,
        scope("project/beta")
    );
    // Below it is fine; beside it is refused, naming the session.
    e.remember(NewMemory::new(scope("project/beta/sprint/s1"), "sprint note").session("s"))
        .unwrap();
    let before = fingerprint(&e);
    let err = e
        .remember(NewMemory::new(scope("project/alpha"), "elsewhere").session("s"))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidField { field, reason } if field == "session" && reason.contains("project/alpha")),
        "{err}"
    );
    let err = e
        .remember_batch(
            vec![
                NewMemory::new(scope("project/beta"), "ok").session("s"),
                NewMemory::new(scope("global"), "not ok").session("s"),
            ],
            strata::Confirm::No,
        )
        .unwrap_err();
    assert!(err.to_string().contains("item 1"), "{err}");
    // A batch's new session takes its first item's scope.
    let err = e
        .remember_batch(
            vec![
                NewMemory::new(scope("task/t1"), "first").session("fresh"),
                NewMemory::new(scope("task/t2"), "second").session("fresh"),
            ],
            strata::Confirm::No,
        )
        .unwrap_err();
    assert!(err.to_string().contains("item 1"), "{err}");
    assert_eq!(fingerprint(&e), before);
    // A session from before this rule (imported as exported) that holds a
    // memory outside the caller's fence: the manifest counts only the
    // caller's, and archiving moves only the caller's.
    let legacy = r#"{"id":"0194a000-0000-7000-8000-000000000001","scope":"project/beta","kind":"decision","content":"beta in a shared session","tags":[],"importance":0.5,"source":"external","session":"shared","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","access_count":0,"pinned":false,"sensitive":false,"tokens":5,"checksum":"x","version":1}"#;
    let mut l: Value = serde_json::from_str(legacy).unwrap();
    l["checksum"] = json!(strata::checksum("beta in a shared session", None));
    let mut l2 = l.clone();
    l2["id"] = json!("0194a000-0000-7000-8000-000000000002");
    l2["scope"] = json!("session/shared");
    l2["content"] = json!("a turn");
    l2["checksum"] = json!(strata::checksum("a turn", None));
    e.import(
        &mut format!("{l}\n{l2}\n").as_bytes(),
        OnConflict::Error,
        &mut |_| {},
    )
    .unwrap();
    let fence = Fence::within(vec![scope("session/shared")]);
    let man = e.session_manifest_within("shared", &fence).unwrap();
    assert_eq!(man.memories, 1, "only the caller's memory is counted");
    assert_eq!(e.session_manifest("shared").unwrap().memories, 2);
    let s = e.archive_session_within("shared", &fence).unwrap();
    assert!(
        s.archived_at.is_none(),
        "beta's memory keeps the session open"
    );
    assert!(
        e.get("0194a000-0000-7000-8000-000000000001")
            .unwrap()
            .is_some()
    );
    assert!(
        e.get("0194a000-0000-7000-8000-000000000002")
            .unwrap()
            .is_none()
    );
    // A session outside the fence is not found, exactly like a missing one.
    let other = Fence::within(vec![scope("project/alpha")]);
    for id in ["shared", "nosuch"] {
        let err = e.session_manifest_within(id, &other).unwrap_err();
        assert_eq!(err.to_string(), format!("session `{id}` not found"));
        let err = e.archive_session_within(id, &other).unwrap_err();
        assert_eq!(err.to_string(), format!("session `{id}` not found"));
    }
}

fn an_imported_vector_never_fixes_a_models_length(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(NewMemory::new(scope("project/alpha"), "with a vector"))
        .unwrap();
    let with_vec = |dims: usize| {
        let mut l = line_of(&e, &m.id);
        l["id"] = json!(uuid::Uuid::now_v7().to_string());
        l["embedding"] = json!({"model": "m8", "vector": vec![0.5f32; dims]});
        l
    };
    // Two lengths of one model in one input.
    let before = fingerprint(&e);
    let text = format!("{}\n{}\n", with_vec(8), with_vec(3));
    let err = e
        .import(&mut text.as_bytes(), OnConflict::Error, &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidImport { line: 2, reason } if reason.contains("length 3") && reason.contains("length 8")),
        "{err}"
    );
    assert_eq!(fingerprint(&e), before);
    // A length other than the store's.
    let text = format!("{}\n", with_vec(8));
    e.import(&mut text.as_bytes(), OnConflict::Error, &mut |_| {})
        .unwrap();
    let before = fingerprint(&e);
    let text = format!("{}\n", with_vec(3));
    let err = e
        .import(&mut text.as_bytes(), OnConflict::Error, &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidImport { line: 1, .. }),
        "{err}"
    );
    assert_eq!(fingerprint(&e), before);
}

backends!(engine:
    import_never_replaces_or_reveals_a_memory_outside_the_fence,
    a_fenced_import_writes_to_sessions_like_any_writer,
    sessions_hold_only_memories_inside_their_scope,
    an_imported_vector_never_fixes_a_models_length,
);

#[test]
fn another_applications_database_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ann');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = Engine::open(strata::Config::sqlite(&path)).unwrap_err();
    assert!(matches!(err, Error::ForeignDatabase { .. }), "{err}");
    assert!(err.to_string().contains("users"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    let wal = dir.path().join("app.db-wal");
    assert!(!wal.exists(), "a write-ahead log was created");
    // An empty file and strata's own file open as before.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    Engine::open(strata::Config::sqlite(&empty)).unwrap();
    Engine::open(strata::Config::sqlite(&empty)).unwrap();
}
