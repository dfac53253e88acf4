//! JSONL export/import: lossless round trips, clear errors on bad lines, and
//! a store left unchanged by a failed import.

use proptest::prelude::*;
use serde_json::json;
use strata::{Embedding, Engine, Error, Export, OnConflict, Provenance, Role, Source};

use crate::harness::{MakeEngine, TestEngine, fingerprint, mem, now, scope};

fn export_all(e: &Engine) -> String {
    let mut out = Vec::new();
    e.export(&Export::user_data(None, None), &mut out, &mut |_| {})
        .unwrap();
    String::from_utf8(out).unwrap()
}

fn import(e: &Engine, text: &str, mode: OnConflict) -> strata::Result<strata::ImportCounts> {
    e.import(&mut text.as_bytes(), mode, &mut |_| {})
}

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-zé😀 \"\\\\]{0,12}".prop_map(|s| json!(s)),
        Just(serde_json::Value::Null),
    ]
}

fn payload() -> impl Strategy<Value = Option<serde_json::Value>> {
    prop::option::of(
        prop::collection::btree_map("[a-z]{1,6}", json_leaf(), 0..4).prop_map(|m| json!(m)),
    )
}

prop_compose! {
    fn arb_memory()(
        content in "[a-zA-Z0-9 ,.!?é😀\n\"\\\\]{1,80}",
        scope_ in prop::sample::select(vec!["global", "project/a", "project/a/sprint/s1", "task/t1", "agent/x"]),
        role in prop::option::of(prop::sample::select(vec![Role::User, Role::Assistant, Role::Tool])),
        payload in payload(),
        tags in prop::collection::vec("[a-z:_ -]{1,10}", 0..4),
        importance in 0.0f64..=1.0,
        pinned in any::<bool>(),
        sensitive in any::<bool>(),
        access in 0u64..1000,
        // One model, one length: a store refuses a second length.
        vector in prop::option::of(prop::collection::vec(-10.0f32..10.0, 3)),
        expires in prop::option::of(1i64..10_000_000),
        prov in any::<bool>(),
    ) -> strata::Memory {
        let mut m = mem(scope_, "x");
        m.content = if content.trim().is_empty() { "x".into() } else { content };
        m.role = role;
        m.payload = payload;
        m.checksum = strata::checksum(&m.content, m.payload.as_ref());
        let mut seen = Vec::new();
        for t in tags { if !seen.contains(&t) { seen.push(t); } }
        m.tags = seen;
        m.importance = importance;
        m.pinned = pinned;
        m.sensitive = sensitive;
        m.access_count = access;
        m.last_accessed_at = (access > 0).then_some(m.created_at);
        m.source = if pinned { Source::Learned } else { Source::External };
        m.embedding = vector.map(|v| Embedding { model: "mini".into(), vector: v });
        m.expires_at = expires.map(|s| m.created_at + jiff::SignedDuration::from_secs(s));
        m.provenance = prov.then(|| Provenance { from_id: "src".into(), from_scope: scope("task/t0"), at: m.created_at });
        m
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn export_import_export_is_identical(ms in prop::collection::vec(arb_memory(), 1..12), archive_every in 2usize..5) {
        let a = TestEngine::sqlite(|_| {});
        for (i, m) in ms.iter().enumerate() {
            a.store().put(m).unwrap();
            if i % archive_every == 0 {
                a.store().archive(std::slice::from_ref(&m.id), "evicted", m.created_at).unwrap();
            } else if i % 3 == 1 {
                let mut n = m.clone();
                n.content.push_str(" (edited)");
                n.checksum = strata::checksum(&n.content, n.payload.as_ref());
                a.store().update(&n, 1).unwrap();
            }
        }
        let first = export_all(&a);
        for b in [TestEngine::memory(|_| {}), TestEngine::sqlite(|_| {})] {
            let r = import(&b, &first, OnConflict::Error).unwrap();
            prop_assert_eq!(r.imported, ms.len());
            prop_assert_eq!(export_all(&b), first.clone());
        }
    }
}

backends!(engine: bad_lines_are_named_and_change_nothing, an_import_that_is_not_utf8_names_its_line, conflicts_follow_the_mode, sensitive_is_left_out_unless_asked, a_default_export_is_a_full_backup);

/// `Export::default()` leaves nothing out: imported into an empty store it
/// gives the same store back (every line, archive, history, session).
fn a_default_export_is_a_full_backup(make: MakeEngine) {
    let e = make(&|c| c.max_items = 3);
    let plain = e
        .remember(strata::NewMemory::new(scope("project/a"), "plain").key("k"))
        .unwrap();
    e.remember(strata::NewMemory::new(scope("project/a"), "plain, v2").key("k"))
        .unwrap();
    e.update(
        &plain.id,
        strata::Patch {
            content: Some("edited".into()),
            ..Default::default()
        },
        1,
    )
    .ok();
    e.remember(strata::NewMemory::new(scope("project/a"), "secret").sensitive(true))
        .unwrap();
    e.remember(
        strata::NewMemory::new(scope("session/s1"), "a turn")
            .session("s1")
            .pinned(true),
    )
    .unwrap();
    for i in 0..4 {
        // Over max_items: the lowest go to the archive.
        e.remember(
            strata::NewMemory::new(scope("project/a"), format!("filler {i}")).importance(0.01),
        )
        .unwrap();
    }
    let stats = e.stats().unwrap();
    assert!(
        stats.archived > 0 && stats.history > 0 && stats.sessions > 0,
        "{stats:?}"
    );
    let mut out = Vec::new();
    let r = e.export(&Export::default(), &mut out, &mut |_| {}).unwrap();
    assert_eq!(
        (r.sensitive_skipped, r.archived_skipped, r.history_skipped),
        (0, 0, 0)
    );
    assert!(r.archived > 0 && r.history > 0, "{r:?}");
    let empty = make(&|c| c.max_items = 3);
    empty
        .import(&mut out.as_slice(), OnConflict::Error, &mut |_| {})
        .unwrap();
    assert_eq!(fingerprint(&empty), fingerprint(&e));
}

fn bad_lines_are_named_and_change_nothing(make: MakeEngine) {
    let e = make(&|_| {});
    e.remember(strata::NewMemory::new(scope("project/a"), "already here"))
        .unwrap();
    let good = export_all(&e);
    let src = make(&|_| {});
    src.remember(strata::NewMemory::new(scope("project/b"), "new one"))
        .unwrap();
    let line = export_all(&src);
    let line = line.trim();
    let before = fingerprint(&e);
    let bad_cases = [
        (format!("{line}\n{{not json"), "line 2", "invalid JSON"),
        (format!("{line}\n[1,2]"), "line 2", "expected a JSON object"),
        (
            line.replace("\"importance\":", "\"importance\":2.0,\"x\":"),
            "line 1",
            "unknown field",
        ),
        (
            line.replacen("\"scope\":\"project/b\"", "\"scope\":\"project//b\"", 1),
            "line 1",
            "empty segment",
        ),
        (
            line.replacen("\"content\":\"new one\"", "\"content\":\"tampered\"", 1),
            "line 1",
            "checksum",
        ),
        (
            line.replacen("\"kind\":\"note\"", "\"kind\":\"Not A Kind\"", 1),
            "line 1",
            "kind",
        ),
        (format!("{line}\n{line}"), "line 2", "appears twice"),
        (
            line.replacen("\"version\":1", "\"version\":0", 1),
            "line 1",
            "version",
        ),
    ];
    for (text, where_, what) in bad_cases {
        let err = import(&e, &text, OnConflict::Error).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(where_) && msg.contains(what),
            "{msg}\n--- for ---\n{text}"
        );
        assert_eq!(fingerprint(&e), before, "a failed import changed the store");
    }
    assert!(matches!(
        import(&e, &good, OnConflict::Error),
        Err(Error::DuplicateId(_))
    ));
    assert_eq!(fingerprint(&e), before);
    import(&e, &format!("\n{line}\n\n"), OnConflict::Error).unwrap();
}

/// Found by the `jsonl_import` fuzz target: bytes that are not UTF-8 were
/// an I/O error ("reading import", as if the file were unreadable), not
/// the input's fault naming its line. The server checked UTF-8 itself.
fn an_import_that_is_not_utf8_names_its_line(make: MakeEngine) {
    let e = make(&|_| {});
    let before = fingerprint(&e);
    let err = e
        .import(&mut &b"\n\xff{\n"[..], OnConflict::Error, &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidImport { line: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("UTF-8"), "{err}");
    assert_eq!(fingerprint(&e), before);
}

fn conflicts_follow_the_mode(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(strata::NewMemory::new(scope("project/a"), "original"))
        .unwrap();
    let text = export_all(&e);
    let r = import(&e, &text, OnConflict::Skip).unwrap();
    assert_eq!((r.imported, r.skipped), (0, 1));
    let changed = text
        .replace("\"content\":\"original\"", "\"content\":\"replaced\"")
        .replace(&m.checksum, &strata::checksum("replaced", None));
    let r = import(&e, &changed, OnConflict::Replace).unwrap();
    assert_eq!((r.imported, r.replaced), (1, 1));
    assert_eq!(e.get(&m.id).unwrap().unwrap().content, "replaced");
}

/// Sensitive memories are in the default export (a full backup) and out
/// when left out, with the count reported.
fn sensitive_is_left_out_unless_asked(make: MakeEngine) {
    let e = make(&|_| {});
    e.remember(strata::NewMemory::new(scope("project/a"), "public"))
        .unwrap();
    e.remember(strata::NewMemory::new(scope("project/a"), "secret token").sensitive(true))
        .unwrap();
    let no_sensitive = Export {
        include_sensitive: false,
        ..Export::default()
    };
    let mut out = Vec::new();
    let r = e.export(&no_sensitive, &mut out, &mut |_| {}).unwrap();
    assert_eq!((r.memories, r.sensitive_skipped), (1, 1));
    assert!(!String::from_utf8(out).unwrap().contains("secret"));
    let mut out = Vec::new();
    let r = e.export(&Export::default(), &mut out, &mut |_| {}).unwrap();
    assert_eq!((r.memories, r.sensitive_skipped), (2, 0));
    assert!(String::from_utf8(out).unwrap().contains("secret"));
    let mut out = Vec::new();
    let v = strata::View::parse(&["project/a/**"]).unwrap();
    e.export(&Export::user_data(Some(v), None), &mut out, &mut |_| {})
        .unwrap();
    assert!(String::from_utf8(out).unwrap().contains("secret"));
    // A version that was sensitive stays out of history exports too.
    let m = e
        .remember(strata::NewMemory::new(scope("project/a"), "api key sk-123").sensitive(true))
        .unwrap();
    e.update(
        &m.id,
        strata::Patch {
            content: Some("rotated".into()),
            sensitive: Some(false),
            ..Default::default()
        },
        1,
    )
    .unwrap();
    let mut out = Vec::new();
    let r = e.export(&no_sensitive, &mut out, &mut |_| {}).unwrap();
    assert_eq!(r.history_skipped, 1);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("rotated") && !text.contains("sk-123"),
        "{text}"
    );
    let _ = now();
}
