//! Forgetting: removed everywhere, including the bytes of the file.

use serde_json::json;
use strata::SqliteStore;
use strata::{Confirm, Error, Filter, Forget, ForgetOptions, NewMemory, Recall};

use crate::harness::{MakeEngine, TestEngine, fingerprint, scope, view};

fn file_contains(path: &std::path::Path, needle: &str) -> bool {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn forgotten_text_leaves_the_database_file() {
    let e = TestEngine::sqlite(|_| {});
    let secret = "zorbulax quintessential passphrase";
    let m = e
        .remember(
            NewMemory::new(scope("project/a"), format!("the vault phrase is {secret}"))
                .key("vault")
                .payload(json!({"hint": "xylophonic"})),
        )
        .unwrap();
    // A second version puts the first into history; both must go.
    let m2 = e
        .remember(NewMemory::new(scope("project/a"), format!("rotated: {secret} v2")).key("vault"))
        .unwrap();
    assert_eq!(m.id, m2.id);
    for i in 0..200 {
        e.remember(NewMemory::new(
            scope("project/a"),
            format!("unrelated filler memory {i}"),
        ))
        .unwrap();
    }
    let store = SqliteStore::open(e.db_path(), Default::default()).unwrap();
    store.checkpoint().unwrap();
    assert!(
        file_contains(&e.db_path(), "zorbulax"),
        "the test must see the text before forgetting"
    );
    e.forget(&Forget::Id(m.id.clone()), ForgetOptions::default())
        .unwrap();
    store.checkpoint().unwrap();
    for needle in ["zorbulax", "quintessential", "xylophonic", "passphrase"] {
        assert!(
            !file_contains(&e.db_path(), needle),
            "`{needle}` is still in the file after forget"
        );
        let wal = e.db_path().with_extension("db-wal");
        if wal.exists() {
            assert!(
                !file_contains(&wal, needle),
                "`{needle}` is still in the WAL"
            );
        }
    }
    assert!(e.history(&m.id).unwrap().is_empty());
    let hits = e
        .recall(&Recall::new("zorbulax", view(&["project/a"])))
        .unwrap();
    assert!(hits.is_empty());
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

backends!(engine: bulk_forget_selectors, pinned_survive_bulk_unless_forced, global_needs_confirmation, forget_errors_change_nothing);

fn bulk_forget_selectors(make: MakeEngine) {
    let e = make(&|c| c.max_items = 0);
    let a = |s: &str, c: &str| e.remember(NewMemory::new(scope(s), c)).unwrap();
    a("project/a", "keep me");
    let d = e
        .remember(NewMemory::new(scope("project/a"), "drop decision").kind(strata::Kind::Decision))
        .unwrap();
    a("project/a/sprint/s1", "sprint note");
    a("project/b", "other project");
    let r = e
        .forget(
            &Forget::Filter {
                view: view(&["project/a"]),
                filter: Filter::parse(&json!({"kind": "decision"})).unwrap(),
            },
            ForgetOptions::default(),
        )
        .unwrap();
    assert_eq!(r.ids, vec![d.id]);
    let r = e
        .forget(&Forget::Scope(scope("project/a")), ForgetOptions::default())
        .unwrap();
    assert_eq!(r.deleted, 2, "scope and subtree");
    assert_eq!(e.count(&view(&["project/**"]), &Filter::all()).unwrap(), 1);
    e.create_session(Some("s9"), None, None).unwrap();
    e.store_conversation("s9", strata::Role::User, "hello there")
        .unwrap();
    e.store_conversation("s9", strata::Role::Assistant, "hi")
        .unwrap();
    let r = e
        .forget(&Forget::Session("s9".into()), ForgetOptions::default())
        .unwrap();
    assert_eq!(r.deleted, 2);
    assert!(e.conversation_history("s9").unwrap().is_empty());
    let future = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    let r = e
        .forget(
            &Forget::Before {
                before: future,
                view: Some(view(&["project/**"])),
            },
            ForgetOptions::default(),
        )
        .unwrap();
    assert_eq!(r.deleted, 1);
    assert_eq!(e.stats().unwrap().memories, 0);
}

fn pinned_survive_bulk_unless_forced(make: MakeEngine) {
    let e = make(&|_| {});
    let p = e
        .remember(NewMemory::new(scope("project/a"), "pinned fact").pinned(true))
        .unwrap();
    e.remember(NewMemory::new(scope("project/a"), "loose fact"))
        .unwrap();
    let r = e
        .forget(&Forget::Scope(scope("project/a")), ForgetOptions::default())
        .unwrap();
    assert_eq!((r.deleted, r.pinned_kept), (1, 1));
    assert!(e.get(&p.id).unwrap().is_some());
    let r = e
        .forget(
            &Forget::Scope(scope("project/a")),
            ForgetOptions {
                force: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((r.deleted, r.pinned_kept), (1, 0));
    let p = e
        .remember(NewMemory::new(scope("project/a"), "pinned again").pinned(true))
        .unwrap();
    e.forget(&Forget::Id(p.id.clone()), ForgetOptions::default())
        .unwrap();
    assert!(
        e.get(&p.id).unwrap().is_none(),
        "one named id is not a bulk deletion"
    );
}

fn global_needs_confirmation(make: MakeEngine) {
    let e = make(&|_| {});
    e.remember(NewMemory::new(scope("global"), "global fact"))
        .unwrap();
    let before = fingerprint(&e);
    let err = e
        .forget(&Forget::Scope(scope("global")), ForgetOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::NeedsConfirmation(_)), "{err}");
    let everything = Forget::Before {
        before: jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1),
        view: None,
    };
    assert!(matches!(
        e.forget(&everything, ForgetOptions::default()),
        Err(Error::NeedsConfirmation(_))
    ));
    assert_eq!(fingerprint(&e), before);
    let r = e
        .forget(
            &Forget::Scope(scope("global")),
            ForgetOptions {
                confirm: Confirm::Yes,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(r.deleted, 1);
}

fn forget_errors_change_nothing(make: MakeEngine) {
    let e = make(&|_| {});
    e.remember(NewMemory::new(scope("project/a"), "stays"))
        .unwrap();
    let before = fingerprint(&e);
    assert!(matches!(
        e.forget(&Forget::Id("missing".into()), ForgetOptions::default()),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        e.forget(&Forget::Session("nope".into()), ForgetOptions::default()),
        Err(Error::SessionNotFound(_))
    ));
    assert!(
        e.forget(&Forget::Session("bad id".into()), ForgetOptions::default())
            .is_err()
    );
    let dry = e
        .forget(
            &Forget::Scope(scope("project/a")),
            ForgetOptions {
                dry_run: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(dry.deleted, 1);
    assert_eq!(fingerprint(&e), before);
}
